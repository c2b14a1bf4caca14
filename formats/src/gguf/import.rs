//! GGUF tensors as a conversion source: names mapped to Hugging Face ones, llama q/k rows put
//! back in HF order, and Q4_0 / Q4_1 blocks carried over into our block-32 Q4 without
//! requantizing whenever our f16 parameters can hold them exactly.
//!
//! Q4_0 `w = (q − 8)·d` is our symmetric Q4 with scale d. Q4_1 `w = q·d + m` is our asymmetric
//! Q4 with scale d and zero `m + 8d`; decoding `(q − 8)·d + zero` rounds the same real number
//! once, so it is bit-identical exactly when `m + 8d` is representable in f16.

use super::ggml::{dequantize, GgmlType};
use super::model::{family, gguf_name, hf_name, llama_qk_row, norm_shift};
use super::reader::{GgufFile, GgufTensor};
use crate::hf::ModelSpec;
use crate::quant::q4::{self, BlockParams};
use crate::quant::QuantType;
use half::f16;

/// The stored row for each HF row (llama q/k), or `None` when rows are in order.
pub fn row_map(f: &GgufFile, spec: &ModelSpec, hf: &str, rows: usize) -> Option<Vec<usize>> {
    let qk = hf.contains("self_attn.q_proj") || hf.contains("self_attn.k_proj");
    (f.architecture() == Some("llama") && qk)
        .then(|| (0..rows).map(|r| llama_qk_row(r, spec.head_dim)).collect())
}

/// HF-named tensors of the file (tensors with no HF counterpart, such as `rope_freqs`, which
/// lives in the spec, are left out).
pub fn tensors(f: &GgufFile) -> Vec<(String, &GgufTensor)> {
    let Some(fam) = family(f) else {
        return Vec::new();
    };
    f.tensors
        .iter()
        .filter_map(|t| hf_name(&t.name, fam).map(|n| (n, t)))
        .collect()
}

pub fn tensor<'a>(f: &'a GgufFile, hf: &str) -> Option<&'a GgufTensor> {
    gguf_name(hf, family(f)?).and_then(|g| f.tensor(&g))
}

/// Our storage type that holds a ggml type without requantizing, if any.
pub fn carried_type(ty: GgmlType) -> Option<QuantType> {
    match ty {
        GgmlType::F32 => Some(QuantType::F32),
        GgmlType::F16 => Some(QuantType::F16),
        GgmlType::BF16 => Some(QuantType::BF16),
        GgmlType::Q4_0 => Some(QuantType::Q4 {
            block: 32,
            sym: true,
        }),
        GgmlType::Q4_1 => Some(QuantType::Q4 {
            block: 32,
            sym: false,
        }),
        _ => None,
    }
}

/// All values in HF row order.
pub fn read_f32(f: &GgufFile, spec: &ModelSpec, hf: &str, t: &GgufTensor) -> Vec<f32> {
    let (rows, cols) = t.matrix_shape();
    let row_bytes = t.ty.bytes_for(cols as u64).expect("checked at open") as usize;
    let map = row_map(f, spec, hf, rows);
    let mut out = vec![0.0f32; rows * cols];
    let b = t.data.as_slice();
    for (r, o) in out.chunks_exact_mut(cols).enumerate() {
        let src = map.as_ref().map_or(r, |m| m[r]);
        dequantize(t.ty, &b[src * row_bytes..(src + 1) * row_bytes], o);
    }
    let shift = norm_shift(spec.family, hf);
    if shift != 0.0 {
        out.iter_mut().for_each(|x| *x += shift);
    }
    out
}

/// A quantized tensor's ggml blocks as stored, rows in logical order (llama's q/k rows
/// unpermuted): what `QuantType::Ggml` keeps in a `.pocket`.
pub fn blocks_in_row_order(f: &GgufFile, spec: &ModelSpec, hf: &str, t: &GgufTensor) -> Vec<u8> {
    let b = t.data.as_slice();
    let (rows, _) = t.matrix_shape();
    match row_map(f, spec, hf, rows) {
        Some(map) if rows > 0 && t.dims.len() == 2 => {
            let row_bytes = b.len() / rows;
            let mut out = Vec::with_capacity(b.len());
            for &r in &map {
                out.extend_from_slice(&b[r * row_bytes..(r + 1) * row_bytes]);
            }
            out
        }
        _ => b.to_vec(),
    }
}

/// Q4_0/Q4_1 in our layout, or the number of blocks f16 parameters cannot hold exactly.
pub fn q4_bytes(
    f: &GgufFile,
    spec: &ModelSpec,
    hf: &str,
    t: &GgufTensor,
) -> Option<Result<Vec<u8>, usize>> {
    let sym = match t.ty {
        GgmlType::Q4_0 => true,
        GgmlType::Q4_1 => false,
        _ => return None,
    };
    let (rows, cols) = t.matrix_shape();
    let (_, bb) = t.ty.block();
    let row_bytes = cols / 32 * bb;
    let map = row_map(f, spec, hf, rows);
    let b = t.data.as_slice();
    let mut codes = Vec::with_capacity(rows * cols);
    let mut params = Vec::with_capacity(rows * cols / 32);
    let mut inexact = 0;
    for r in 0..rows {
        let src = map.as_ref().map_or(r, |m| m[r]);
        for blk in b[src * row_bytes..(src + 1) * row_bytes].chunks_exact(bb) {
            let d = f16::from_le_bytes([blk[0], blk[1]]);
            let (p, qs) = if sym {
                (
                    BlockParams {
                        scale: d,
                        zero: f16::ZERO,
                    },
                    &blk[2..18],
                )
            } else {
                let m = f16::from_le_bytes([blk[2], blk[3]]);
                let zero = m.to_f32() + 8.0 * d.to_f32();
                let z = f16::from_f32(zero);
                if z.to_f32() != zero {
                    inexact += 1;
                }
                (BlockParams { scale: d, zero: z }, &blk[4..20])
            };
            // ggml: element j in the low nibble of byte j, element j+16 in its high nibble.
            codes.extend(qs.iter().map(|q| q & 0x0F));
            codes.extend(qs.iter().map(|q| q >> 4));
            params.push(p);
        }
    }
    if inexact > 0 {
        return Some(Err(inexact));
    }
    Some(Ok(q4::pack_exact(rows, cols, 32, sym, &codes, &params)))
}
