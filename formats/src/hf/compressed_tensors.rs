//! Import of checkpoints in the compressed-tensors `pack-quantized` format (int4, group-wise,
//! symmetric or with zero points), as written by the `compressed-tensors` package (see
//! docs/compressed-tensors.md). Each quantized linear layer `<m>` is stored as
//! `<m>.weight_packed` (I32, 8 codes per word, first column in the LOW nibble, code = q + 8),
//! `<m>.weight_scale`, `<m>.weight_zero_point` (asymmetric; I32, 8 ROWS per word) and
//! `<m>.weight_shape`; it dequantizes as `(q − zp) · scale`.
//!
//! We carry the integers over unchanged: our Q4 code is the same nibble `q + 8`, our scale is
//! the scale, and our zero point is `−zp · scale`, so `(code − 8)·scale + zero` is the exact
//! product `(q − zp)·scale` whenever scale and `zp·scale` are exact in f16 (true for bf16 and
//! f16 scales in the normal range). No requantization happens.

use super::checkpoint::HfCheckpoint;
use super::safetensors::{DType, MappedTensor};
use crate::quant::q4::{self, BlockParams};
use crate::quant::{QuantType, Q4_BLOCKS};
use crate::FormatError;
use half::f16;
use std::collections::BTreeMap;

/// One quantized linear layer.
#[derive(Clone, Debug)]
pub struct CtLinear {
    /// The module name, e.g. `model.layers.0.self_attn.q_proj`.
    pub module: String,
    pub rows: usize,
    pub cols: usize,
    pub group: usize,
    pub sym: bool,
}

impl CtLinear {
    pub fn weight_name(&self) -> String {
        format!("{}.weight", self.module)
    }

    pub fn storage(&self) -> QuantType {
        QuantType::Q4 {
            block: self.group,
            sym: self.sym,
        }
    }
}

/// The quantized layers of a compressed-tensors checkpoint, by weight name (`<m>.weight`).
pub fn detect(ckpt: &HfCheckpoint) -> Result<Option<BTreeMap<String, CtLinear>>, FormatError> {
    let path = ckpt.dir.join("config.json");
    let Some(q) = ckpt.raw_config.get("quantization_config") else {
        return Ok(None);
    };
    let bad = |reason: String| FormatError::InvalidField {
        path: path.clone(),
        field: "quantization_config".into(),
        reason,
    };
    let method = q.get("quant_method").and_then(|v| v.as_str()).unwrap_or("");
    if method != "compressed-tensors" {
        return Err(bad(format!(
            "quant_method `{method}` is not supported (compressed-tensors pack-quantized only)"
        )));
    }
    let groups = q
        .get("config_groups")
        .and_then(|g| g.as_object())
        .ok_or_else(|| bad("no config_groups".into()))?;
    for (name, g) in groups {
        let format = g
            .get("format")
            .or(q.get("format"))
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let w = g
            .get("weights")
            .ok_or_else(|| bad(format!("group {name} has no weights scheme")))?;
        let bits = w.get("num_bits").and_then(|v| v.as_u64());
        let kind = w.get("type").and_then(|v| v.as_str());
        let strategy = w.get("strategy").and_then(|v| v.as_str());
        if format != "pack-quantized"
            || bits != Some(4)
            || kind != Some("int")
            || strategy != Some("group")
        {
            return Err(bad(format!(
                "group {name}: format {format:?}, {bits:?} bits, type {kind:?}, strategy {strategy:?}: only pack-quantized 4-bit int group quantization is supported"
            )));
        }
        if g.get("input_activations").is_some_and(|a| !a.is_null()) {
            return Err(bad(format!(
                "group {name} quantizes activations: only weight-only schemes are supported"
            )));
        }
    }
    let mut out = BTreeMap::new();
    let modules: Vec<String> = ckpt
        .tensors()
        .filter_map(|t| t.name.strip_suffix(".weight_packed").map(str::to_string))
        .collect();
    for m in modules {
        let lin = read_layout(ckpt, &m)?;
        out.insert(lin.weight_name(), lin);
    }
    Ok(Some(out))
}

fn tensor<'a>(
    ckpt: &'a HfCheckpoint,
    m: &str,
    suffix: &str,
) -> Result<&'a MappedTensor, FormatError> {
    ckpt.tensor(&format!("{m}.{suffix}"))
}

fn bad_tensor(ckpt: &HfCheckpoint, name: &str, reason: String) -> FormatError {
    FormatError::BadTensor {
        path: ckpt.file_of(name).unwrap_or(&ckpt.dir).to_path_buf(),
        name: name.into(),
        reason,
    }
}

fn read_layout(ckpt: &HfCheckpoint, m: &str) -> Result<CtLinear, FormatError> {
    let shape_t = tensor(ckpt, m, "weight_shape")?;
    let packed = tensor(ckpt, m, "weight_packed")?;
    let scale = tensor(ckpt, m, "weight_scale")?;
    let dims: Vec<i64> = match (&shape_t.dtype, shape_t.bytes().len()) {
        (DType::Other(d), 16) if d == "I64" => shape_t
            .bytes()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
            .collect(),
        _ => {
            return Err(bad_tensor(
                ckpt,
                &shape_t.name,
                "expected two I64 values".into(),
            ))
        }
    };
    let (rows, cols) = match dims[..] {
        [r, c] if r > 0 && c > 0 && r < 1 << 24 && c < 1 << 24 => (r as usize, c as usize),
        _ => {
            return Err(bad_tensor(
                ckpt,
                &shape_t.name,
                format!("invalid shape {dims:?}"),
            ))
        }
    };
    if !matches!(&packed.dtype, DType::Other(d) if d == "I32")
        || cols % 8 != 0
        || packed.shape != [rows, cols / 8]
    {
        return Err(bad_tensor(
            ckpt,
            &packed.name,
            format!(
                "expected I32 [{rows}, {}], got {} {:?}",
                cols / 8,
                packed.dtype.name(),
                packed.shape
            ),
        ));
    }
    let groups = match scale.shape[..] {
        [r, g] if r == rows && g > 0 && cols % g == 0 => g,
        _ => {
            return Err(bad_tensor(
                ckpt,
                &scale.name,
                format!("shape {:?} does not fit [{rows}, {cols}]", scale.shape),
            ))
        }
    };
    if scale.dtype.size().is_none() {
        return Err(bad_tensor(
            ckpt,
            &scale.name,
            format!("dtype {} (expected BF16, F16 or F32)", scale.dtype.name()),
        ));
    }
    let group = cols / groups;
    if !Q4_BLOCKS.contains(&group) {
        return Err(bad_tensor(
            ckpt,
            &packed.name,
            format!("group size {group} is not supported (32, 64 or 128)"),
        ));
    }
    let sym = match ckpt.get(&format!("{m}.weight_zero_point")) {
        None => true,
        Some(z) => {
            if !matches!(&z.dtype, DType::Other(d) if d == "I32")
                || z.shape != [rows.div_ceil(8), groups]
            {
                return Err(bad_tensor(
                    ckpt,
                    &z.name,
                    format!(
                        "expected I32 [{}, {groups}], got {:?}",
                        rows.div_ceil(8),
                        z.shape
                    ),
                ));
            }
            false
        }
    };
    Ok(CtLinear {
        module: m.to_string(),
        rows,
        cols,
        group,
        sym,
    })
}

/// Codes (our nibble = q + 8, one per byte) and exact block parameters of a layer, or the
/// number of blocks whose parameters are not exact in f16.
struct Decoded {
    codes: Vec<u8>,
    params: Vec<BlockParams>,
    inexact: usize,
    /// The exact dequantized values `(q − zp)·scale`.
    values: Vec<f32>,
}

fn decode(ckpt: &HfCheckpoint, l: &CtLinear) -> Result<Decoded, FormatError> {
    let m = &l.module;
    let words = tensor(ckpt, m, "weight_packed")?.bytes();
    let scales = tensor(ckpt, m, "weight_scale")?
        .to_f32_vec()
        .expect("dtype checked");
    let ng = l.cols / l.group;
    let zps: Option<Vec<i32>> = match ckpt.get(&format!("{m}.weight_zero_point")) {
        Some(z) => {
            let w: Vec<u32> = z
                .bytes()
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
                .collect();
            // Row r, group g: word [r / 8, g], bits 4·(r % 8).
            Some(
                (0..l.rows * ng)
                    .map(|i| {
                        let (r, g) = (i / ng, i % ng);
                        ((w[(r / 8) * ng + g] >> (4 * (r % 8))) & 0xF) as i32 - 8
                    })
                    .collect(),
            )
        }
        None => None,
    };
    let mut codes = Vec::with_capacity(l.rows * l.cols);
    for w in words.chunks_exact(4) {
        let w = u32::from_le_bytes(w.try_into().expect("4"));
        for k in 0..8 {
            codes.push(((w >> (4 * k)) & 0xF) as u8);
        }
    }
    let mut params = Vec::with_capacity(l.rows * ng);
    let mut inexact = 0;
    for i in 0..l.rows * ng {
        let s = scales[i];
        let zp = zps.as_ref().map_or(0, |z| z[i]);
        let p = BlockParams {
            scale: f16::from_f32(s),
            zero: f16::from_f32(-(zp as f32) * s),
        };
        if p.scale.to_f32() != s || p.zero.to_f32() != -(zp as f32) * s {
            inexact += 1;
        }
        params.push(p);
    }
    let mut values = vec![0.0f32; l.rows * l.cols];
    for (i, v) in values.iter_mut().enumerate() {
        let (r, c) = (i / l.cols, i % l.cols);
        let b = r * ng + c / l.group;
        let zp = zps.as_ref().map_or(0, |z| z[b]);
        *v = (codes[i] as i32 - 8 - zp) as f32 * scales[b];
    }
    Ok(Decoded {
        codes,
        params,
        inexact,
        values,
    })
}

/// The layer's weights as exact f32 values `(q − zp)·scale`.
pub fn dequantize(ckpt: &HfCheckpoint, l: &CtLinear) -> Result<Vec<f32>, FormatError> {
    Ok(decode(ckpt, l)?.values)
}

/// The layer in our Q4 storage (same codes, exact parameters), or `None` with the count of
/// blocks whose scale or zero point f16 cannot hold exactly.
pub fn to_q4(ckpt: &HfCheckpoint, l: &CtLinear) -> Result<Result<Vec<u8>, usize>, FormatError> {
    let d = decode(ckpt, l)?;
    if d.inexact > 0 {
        return Ok(Err(d.inexact));
    }
    Ok(Ok(q4::pack_exact(
        l.rows, l.cols, l.group, l.sym, &d.codes, &d.params,
    )))
}
