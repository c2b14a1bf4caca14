//! Any conversion source → GGUF that llama.cpp loads: metadata keys and tensor names as
//! llama.cpp's own converter writes them for `llama`, `qwen2` and `qwen3`, the q/k row order
//! llama.cpp expects for `llama`, and the tokenizer as `tokenizer.ggml.*`.
//!
//! Weights already in our Q4 carry over without requantizing: symmetric block-32 → Q4_0,
//! asymmetric blocks of 32 or 64 → Q4_1 (`m = zero − 8·scale`), whenever f16 holds the result
//! exactly; the blocks where it does not are re-quantized with ggml's reference rule and counted.

use super::ggml::GgmlType;
use super::model::{gguf_name, llama_qk_row};
use super::quantize::quantize;
use super::reader::GgufValue as V;
use super::writer::{GgufWriter, TensorDecl};
use crate::hf::{Family, ModelSpec, RopeScaling};
use crate::model_file::ModelFile;
use crate::quant::{q4, QuantType};
use crate::recipe::is_embedding_or_head;
use crate::FormatError;
use half::f16;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct GgufTensorReport {
    pub name: String,
    pub ty: &'static str,
    /// Blocks copied from our Q4 without requantizing, and blocks that had to be re-quantized.
    pub carried_blocks: usize,
    pub inexact_blocks: usize,
}

#[derive(Debug, Serialize)]
pub struct GgufReport {
    pub output: String,
    pub file_bytes: u64,
    pub tensors: Vec<GgufTensorReport>,
}

/// What llama.cpp's gemma3 fixes in its source rather than reading from the file: every sixth
/// layer global, the local RoPE base 10,000, the softmax scale 1/sqrt(head_dim) (all sizes
/// but 27B), no logit soft-capping.
fn gemma_fits_llamacpp(spec: &ModelSpec) -> Result<(), String> {
    let sl = spec.sliding.as_ref().ok_or("no sliding-window layers")?;
    let pattern: Vec<bool> = (0..spec.num_layers).map(|i| (i + 1) % 6 != 0).collect();
    if sl.layers != pattern {
        return Err("its global layers are not every sixth".into());
    }
    if sl.rope.theta != 10000.0 || sl.rope.scaling != RopeScaling::None {
        return Err(format!(
            "local RoPE base {} (10000 expected)",
            sl.rope.theta
        ));
    }
    if (spec.attn_scale() - 1.0 / (spec.head_dim as f32).sqrt()).abs() > 1e-7 {
        return Err("query_pre_attn_scalar is not head_dim".into());
    }
    if spec.final_logit_softcap.is_some() {
        return Err("logit soft-capping".into());
    }
    Ok(())
}

/// llama.cpp's `general.file_type` for a uniform export type.
fn file_type(t: GgmlType) -> u32 {
    match t {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::IQ4NL => 25,
        GgmlType::IQ4XS => 30,
        GgmlType::BF16 => 32,
        _ => 0,
    }
}

/// The `tokenizer.ggml.pre` name for a tokenizer.json pre-tokenizer, if we know it.
fn pre_name(pre: &Value) -> Option<&'static str> {
    let items: Vec<&Value> = match pre.get("type").and_then(Value::as_str) {
        Some("Sequence") => pre.get("pretokenizers")?.as_array()?.iter().collect(),
        Some(_) => vec![pre],
        None => return None,
    };
    fn kind(v: &Value) -> &str {
        v.get("type").and_then(Value::as_str).unwrap_or("")
    }
    fn pattern(v: &Value) -> &str {
        v.get("pattern")
            .and_then(|p| p.get("Regex"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    match items.as_slice() {
        [d, b] if kind(d) == "Digits" && kind(b) == "ByteLevel" => Some("smollm"),
        [b] if kind(b) == "ByteLevel" => Some("gpt-2"),
        [s, b] if kind(s) == "Split" && kind(b) == "ByteLevel" => {
            let p = pattern(s);
            if p.contains(r"\p{N}{1,3}") {
                Some("llama-bpe")
            } else if p.contains(r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|") {
                Some("qwen2")
            } else {
                None
            }
        }
        _ => None,
    }
}

fn invalid(path: &Path, reason: String) -> FormatError {
    FormatError::Invalid {
        path: path.to_path_buf(),
        reason,
    }
}

fn tokenizer_metadata(
    source: &ModelFile,
    spec: &ModelSpec,
    md: &mut Vec<(String, V)>,
) -> Result<(), FormatError> {
    let path = source.path();
    let tj: Value = serde_json::from_slice(&source.tokenizer_json()?)
        .map_err(|e| invalid(path, format!("tokenizer.json: {e}")))?;
    let model = &tj["model"];
    if model["type"] != "BPE" {
        return Err(invalid(
            path,
            "GGUF export supports byte-level BPE tokenizers only".into(),
        ));
    }
    // Gemma's: BPE with byte fallback over "▁"-spelled spaces, SentencePiece in GGUF terms.
    let spm = spec.family == Family::Gemma3 && model["byte_fallback"] == true;
    let pre = match spm {
        true => Some("default"),
        false => pre_name(&tj["pre_tokenizer"]),
    }
    .ok_or_else(|| {
        invalid(
            path,
            "the tokenizer's pre-tokenizer has no known tokenizer.ggml.pre name".into(),
        )
    })?;
    let n = spec.vocab_size;
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut types = vec![1i32; n];
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| invalid(path, "tokenizer.json has no vocab".into()))?;
    for (tok, id) in vocab {
        if let Some(slot) = id.as_u64().and_then(|i| tokens.get_mut(i as usize)) {
            *slot = Some(tok.clone());
        }
    }
    for a in tj["added_tokens"].as_array().into_iter().flatten() {
        if let (Some(id), Some(content)) = (a["id"].as_u64(), a["content"].as_str()) {
            if let Some(slot) = tokens.get_mut(id as usize) {
                *slot = Some(content.to_string());
                types[id as usize] = if a["special"].as_bool().unwrap_or(false) {
                    3
                } else {
                    4
                };
            }
        }
    }
    if spm {
        for (i, t) in tokens.iter_mut().enumerate() {
            let Some(t) = t else { continue };
            if t.len() > "▁".len() && t.chars().all(|c| c == '▁') {
                // Runs of spaces: stored as spaces and matched whole, as Gemma's own file does
                // (the reader respells them).
                *t = " ".repeat(t.chars().count());
                types[i] = 4;
            } else if t.len() == 6 && t.starts_with("<0x") && t.ends_with('>') && types[i] == 1 {
                types[i] = 6;
            }
        }
        if let Some(u) = model["unk_token"].as_str().and_then(|u| vocab.get(u)) {
            if let Some(ty) = u.as_u64().and_then(|i| types.get_mut(i as usize)) {
                *ty = 2;
            }
            md.push((
                "tokenizer.ggml.unknown_token_id".into(),
                V::U32(u.as_u64().unwrap_or(0) as u32),
            ));
        }
    }
    // Ids the tokenizer does not define (a vocabulary padded for alignment) are "unused".
    let n_tokens = tokens.len();
    let tokens: Vec<V> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            V::Str(t.unwrap_or_else(|| {
                types[i] = 5;
                format!("[PAD{i}]")
            }))
        })
        .collect();
    let merges: Vec<V> = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m {
            Value::String(s) => Some(V::Str(s.clone())),
            Value::Array(p) => Some(V::Str(format!(
                "{} {}",
                p.first()?.as_str()?,
                p.get(1)?.as_str()?
            ))),
            _ => None,
        })
        .collect();
    let kind = if spm { "llama" } else { "gpt2" };
    md.push(("tokenizer.ggml.model".into(), V::Str(kind.into())));
    md.push(("tokenizer.ggml.pre".into(), V::Str(pre.into())));
    md.push(("tokenizer.ggml.tokens".into(), V::Array(tokens)));
    if spm {
        // SentencePiece merges by score: the earlier a token is in the file, the earlier it
        // is built (the order the reader rebuilds the merges in).
        let scores = (0..n_tokens).map(|i| V::F32(-(i as f32))).collect();
        md.push(("tokenizer.ggml.scores".into(), V::Array(scores)));
        md.push(("tokenizer.ggml.add_space_prefix".into(), V::Bool(false)));
    }
    md.push((
        "tokenizer.ggml.token_type".into(),
        V::Array(types.into_iter().map(V::I32).collect()),
    ));
    if !spm {
        md.push(("tokenizer.ggml.merges".into(), V::Array(merges)));
    }
    let meta = source.tokenizer_meta()?;
    let id_of = |t: &Option<String>| {
        t.as_ref().and_then(|t| {
            vocab.get(t).and_then(Value::as_u64).or_else(|| {
                tj["added_tokens"]
                    .as_array()?
                    .iter()
                    .find(|a| a["content"] == t.as_str())?["id"]
                    .as_u64()
            })
        })
    };
    if let Some(b) = spec
        .bos_token_id
        .map(u64::from)
        .or_else(|| id_of(&meta.bos_token))
    {
        md.push(("tokenizer.ggml.bos_token_id".into(), V::U32(b as u32)));
    }
    let eos = id_of(&meta.eos_token).or_else(|| spec.eos_token_ids.first().map(|&e| e as u64));
    if let Some(e) = eos {
        md.push(("tokenizer.ggml.eos_token_id".into(), V::U32(e as u32)));
    }
    if let Some(p) = id_of(&meta.pad_token) {
        md.push(("tokenizer.ggml.padding_token_id".into(), V::U32(p as u32)));
    }
    let adds_bos =
        tj["post_processor"].to_string().contains("SpecialToken") && spec.bos_token_id.is_some();
    md.push(("tokenizer.ggml.add_bos_token".into(), V::Bool(adds_bos)));
    if let Some(t) = meta.chat_template {
        md.push(("tokenizer.chat_template".into(), V::Str(t)));
    }
    Ok(())
}

/// Llama 3 RoPE as per-frequency factors (llama.cpp's `rope_freqs.weight`), as its converter
/// computes them (f64, applied as divisors). `RopeConfig::inv_freq` evaluates the same rule in
/// transformers' f32 order instead; the two stay separate because each must match its own
/// reference implementation to the last bit.
fn rope_factors(spec: &ModelSpec) -> Option<Vec<f32>> {
    let d = spec.head_dim;
    match &spec.rope.scaling {
        RopeScaling::Factors { factors } => Some(factors.clone()),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old = *original_max_position_embeddings as f64;
            let (lo_wl, hi_wl) = (old / low_freq_factor, old / high_freq_factor);
            Some(
                (0..d / 2)
                    .map(|i| {
                        let f =
                            1.0 / (spec.rope.theta as f32).powf((2 * i) as f32 / d as f32) as f64;
                        let wl = 2.0 * std::f64::consts::PI / f;
                        if wl < hi_wl {
                            1.0
                        } else if wl > lo_wl {
                            *factor as f32
                        } else {
                            let smooth =
                                (old / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
                            (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
                        }
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

/// Our Q4 rows as ggml Q4_0/Q4_1 blocks where exact; `None` if the types do not correspond.
/// The ggml 4-bit type our Q4 `from` carries into without requantizing.
fn carry_type(from: QuantType) -> Option<GgmlType> {
    match from {
        QuantType::Q4 {
            block: 32,
            sym: true,
        } => Some(GgmlType::Q4_0),
        QuantType::Q4 {
            block: 32 | 64,
            sym: false,
        } => Some(GgmlType::Q4_1),
        _ => None,
    }
}

fn carry_q4(
    bytes: &[u8],
    rows: usize,
    cols: usize,
    from: QuantType,
    to: GgmlType,
    row_order: &[usize],
) -> Option<(Vec<u8>, usize, usize)> {
    let QuantType::Q4 { block, sym } = from else {
        return None;
    };
    let ok = matches!(
        (sym, to, block),
        (true, GgmlType::Q4_0, 32) | (false, GgmlType::Q4_1, 32 | 64)
    );
    if !ok {
        return None;
    }
    let (codes, params) = q4::planes(bytes, rows, cols);
    let pb = q4::param_bytes(sym);
    let nb = cols / block;
    let (mut out, mut carried, mut inexact) = (Vec::with_capacity(rows * cols), 0, 0);
    let mut vals = vec![0.0f32; cols];
    for &r in row_order {
        let (crow, prow) = (
            &codes[r * cols / 2..][..cols / 2],
            &params[r * nb * pb..][..nb * pb],
        );
        q4::dequantize_row(crow, prow, block, sym, &mut vals);
        for s in 0..cols / 32 {
            let p = q4::read_params(&prow[(s * 32 / block) * pb..][..pb], sym);
            // Our codes of this 32-block, in element order.
            let q: Vec<u8> = (0..32)
                .map(|j| {
                    let e = s * 32 + j;
                    let pair = crow[e / 2];
                    if e % 2 == 0 {
                        pair >> 4
                    } else {
                        pair & 0x0F
                    }
                })
                .collect();
            let m_exact = p.zero.to_f32() as f64 - 8.0 * p.scale.to_f32() as f64;
            let m = f16::from_f64(m_exact);
            if sym || m.to_f64() == m_exact {
                out.extend_from_slice(&p.scale.to_le_bytes());
                if !sym {
                    out.extend_from_slice(&m.to_le_bytes());
                }
                out.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
                carried += 1;
            } else {
                quantize(to, &vals[s * 32..(s + 1) * 32], &mut out);
                inexact += 1;
            }
        }
    }
    Some((out, carried, inexact))
}

#[allow(clippy::too_many_arguments)]
pub fn write_gguf(
    source: &ModelFile,
    quant: GgmlType,
    allow_nonfinite: bool,
    edits: Option<&dyn crate::convert::Edits>,
    importance: Option<&crate::convert::Importance>,
    compensation: Option<&crate::convert::Compensations>,
    dest: &Path,
    progress: &(dyn Fn(u64, u64, &str) + Sync),
) -> Result<GgufReport, FormatError> {
    let spec = source.spec().clone();
    if spec.family == Family::Gemma3 {
        gemma_fits_llamacpp(&spec).map_err(|reason| FormatError::Invalid {
            path: source.path().to_path_buf(),
            reason: format!("llama.cpp's gemma3 cannot hold this model: {reason}"),
        })?;
    }
    let arch = match spec.family {
        Family::Gemma3 => "gemma3",
        f => f.as_str(),
    };
    let a = |k: &str| format!("{arch}.{k}");
    let mut md: Vec<(String, V)> = vec![
        ("general.architecture".into(), V::Str(arch.into())),
        ("general.type".into(), V::Str("model".into())),
        (
            "general.name".into(),
            V::Str(
                source
                    .path()
                    .file_stem()
                    .map(|s| s.to_string_lossy().to_string())
                    .unwrap_or_default(),
            ),
        ),
        (
            a("context_length"),
            V::U32(spec.max_position_embeddings as u32),
        ),
        (a("embedding_length"), V::U32(spec.hidden_size as u32)),
        (a("block_count"), V::U32(spec.num_layers as u32)),
        (
            a("feed_forward_length"),
            V::U32(spec.intermediate_size as u32),
        ),
        (a("attention.head_count"), V::U32(spec.num_heads as u32)),
        (
            a("attention.head_count_kv"),
            V::U32(spec.num_kv_heads as u32),
        ),
        (a("rope.freq_base"), V::F32(spec.rope.theta as f32)),
        (
            a("attention.layer_norm_rms_epsilon"),
            V::F32(spec.rms_norm_eps as f32),
        ),
    ];
    if matches!(spec.family, Family::Qwen3 | Family::Gemma3)
        || spec.head_dim * spec.num_heads != spec.hidden_size
    {
        md.push((a("attention.key_length"), V::U32(spec.head_dim as u32)));
        md.push((a("attention.value_length"), V::U32(spec.head_dim as u32)));
    }
    if let Some(sl) = &spec.sliding {
        md.push((a("attention.sliding_window"), V::U32(sl.window as u32)));
    }
    if let RopeScaling::Linear { factor } = spec.rope.scaling {
        md.push((a("rope.scaling.type"), V::Str("linear".into())));
        md.push((a("rope.scaling.factor"), V::F32(factor as f32)));
    }
    md.push(("general.file_type".into(), V::U32(file_type(quant))));
    md.push(("general.quantization_version".into(), V::U32(2)));
    tokenizer_metadata(source, &spec, &mut md)?;

    // Plan every tensor: GGUF name, type, dims.
    let factors = rope_factors(&spec);
    let mut plan = Vec::new();
    for t in source.tensors() {
        let g = gguf_name(&t.name, spec.family).ok_or_else(|| FormatError::BadTensor {
            path: source.path().to_path_buf(),
            name: t.name.clone(),
            reason: "has no GGUF counterpart".into(),
        })?;
        let (rows, cols) = match t.shape[..] {
            [n] => (1, n),
            [r, c] => (r, c),
            _ => {
                return Err(FormatError::BadTensor {
                    path: source.path().to_path_buf(),
                    name: t.name.clone(),
                    reason: "not a vector or matrix".into(),
                })
            }
        };
        let block_type = matches!(
            quant,
            GgmlType::Q8_0
                | GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::IQ4NL
                | GgmlType::IQ4XS
                | GgmlType::Q5_0
                | GgmlType::Q5_1
        );
        let ty = if t.shape.len() == 1 {
            GgmlType::F32
        } else if block_type && cols % 32 != 0 {
            GgmlType::F16
        } else if let Some(exact) = t.stored.and_then(carry_type).filter(|e| {
            matches!(quant, GgmlType::Q4_0 | GgmlType::Q4_1)
                && (*e == quant || is_embedding_or_head(&t.name))
        }) {
            // Already 4-bit (a .pocket source): the ggml type that holds its blocks exactly,
            // e.g. the default recipe's symmetric block-32 embedding as Q4_0 in a Q4_1 file.
            exact
        } else if matches!(
            quant,
            GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::IQ4NL
                | GgmlType::IQ4XS
                | GgmlType::Q5_0
                | GgmlType::Q5_1
        ) && is_embedding_or_head(&t.name)
            && !t.stored.is_some_and(|q| matches!(q, QuantType::Q4 { .. }))
        {
            // As llama.cpp's quantizer does for its 4- and 5-bit types (Q6_K where rows are a
            // multiple of 256, which ours are not always): the embedding/head stays 8-bit
            // (unless it is already 4-bit in the source: then it is carried over as it is).
            GgmlType::Q8_0
        } else if quant == GgmlType::IQ4XS && cols % 256 != 0 {
            // IQ4_XS's super-blocks are 256 wide: other rows take IQ4_NL, the same values
            // table at 4.5 bits, as llama-quantize falls back.
            GgmlType::IQ4NL
        } else {
            quant
        };
        let dims = if t.shape.len() == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        plan.push((t, g, ty, rows, cols, dims));
    }
    let mut decls: Vec<TensorDecl> = plan
        .iter()
        .map(|(_, g, ty, _, _, dims)| TensorDecl {
            name: g.clone(),
            dims: dims.clone(),
            ty: *ty,
        })
        .collect();
    if let Some(f) = &factors {
        decls.push(TensorDecl {
            name: "rope_freqs.weight".into(),
            dims: vec![f.len() as u64],
            ty: GgmlType::F32,
        });
    }
    let mut w = GgufWriter::create(dest, &md, &decls)?;
    let total: u64 = plan.iter().map(|p| (p.3 * p.4) as u64).sum();
    let mut done = 0;
    let mut reports = Vec::new();
    for (t, g, ty, rows, cols, _) in &plan {
        // llama.cpp's `llama` rotates adjacent pairs: GGUF row g holds HF row order[g].
        let permuted = spec.family == Family::Llama
            && (t.name.contains("self_attn.q_proj") || t.name.contains("self_attn.k_proj"));
        let mut order: Vec<usize> = (0..*rows).collect();
        if permuted {
            for hf in 0..*rows {
                order[llama_qk_row(hf, spec.head_dim)] = hf;
            }
        }
        // Decoded for the check where the source allows it (a .pocket's 4-bit blocks cannot be
        // read as f32; they were checked when that file was written).
        let edited = edits.is_some_and(|e| e.contains_key(&t.name));
        let mut values = crate::convert::edited(source, &t.name, edits);
        if let Ok(v) = &mut values {
            crate::finite::check(source, &t.name, v, allow_nonfinite)?;
            // Gemma's norms as llama.cpp stores them: 1 + w.
            let shift = super::model::norm_shift(spec.family, &t.name);
            v.iter_mut().for_each(|x| *x -= shift);
        }
        let carried = match (t.stored, source.raw_bytes(&t.name), edited) {
            (Some(from), Some(bytes), false) => carry_q4(&bytes, *rows, *cols, from, *ty, &order),
            _ => None,
        };
        let (data, carried_blocks, inexact_blocks) = match carried {
            Some(c) => c,
            None => {
                let values = values?;
                let mut ordered = Vec::with_capacity(values.len());
                for &r in &order {
                    ordered.extend_from_slice(&values[r * cols..(r + 1) * cols]);
                }
                let mut out = Vec::new();
                // A column's importance does not move with the row order.
                let imp = importance
                    .and_then(|m| m.get(&t.name))
                    .map(|v| v.as_slice());
                // Nor does a layer input's compensation (GPTQ works along each row).
                match compensation.and_then(|m| m.get(&t.name)) {
                    Some(c) => super::quantize::quantize_compensated(
                        *ty, &ordered, *cols, imp, c, &mut out,
                    ),
                    None => super::quantize::quantize_weighted(*ty, &ordered, *cols, imp, &mut out),
                }
                (out, 0, 0)
            }
        };
        w.write_tensor(&data)?;
        done += (rows * cols) as u64;
        progress(done, total, &t.name);
        reports.push(GgufTensorReport {
            name: g.clone(),
            ty: ty.name(),
            carried_blocks,
            inexact_blocks,
        });
    }
    if let Some(f) = &factors {
        let mut out = Vec::new();
        quantize(GgmlType::F32, f, &mut out);
        w.write_tensor(&out)?;
    }
    w.finish()?;
    Ok(GgufReport {
        output: dest.display().to_string(),
        file_bytes: std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0),
        tensors: reports,
    })
}
