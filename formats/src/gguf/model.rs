//! GGUF metadata → [`ModelSpec`], and GGUF tensor names ↔ Hugging Face names, for the
//! `llama`, `qwen2`, `qwen3` and `gemma3` architectures as llama.cpp's converter writes them.

use super::reader::{GgufFile, GgufValue};
use crate::hf::{Activation, Family, ModelSpec, RopeConfig, RopeScaling, Sliding};
use crate::FormatError;

/// Gemma's four norms per layer, GGUF ↔ HF. Its `post_attention_layernorm` norms the attention
/// output; the other families' (GGUF `ffn_norm`) is the MLP's input norm.
const GEMMA_NORMS: [(&str, &str); 3] = [
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
];

/// HF name for a GGUF tensor name (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`).
pub fn hf_name(gguf: &str, family: Family) -> Option<String> {
    if family == Family::Gemma3 {
        if let Some((layer, part, kind)) = split_blk(gguf) {
            if let Some((_, hf)) = GEMMA_NORMS.iter().find(|(g, _)| *g == part) {
                return Some(format!("model.layers.{layer}.{hf}.{kind}"));
            }
        }
    }
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let (layer, part, kind) = split_blk(gguf)?;
    let module = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{module}.{kind}"))
}

/// The file's decoder family, from `general.architecture`.
pub fn family(f: &GgufFile) -> Option<Family> {
    f.architecture().and_then(Family::from_model_type)
}

/// What to add to a stored value of tensor `hf` to get the HF value: llama.cpp's converter
/// stores Gemma's norm weights as `1 + w` (its norm multiplies by the weight as is).
pub fn norm_shift(family: Family, hf: &str) -> f32 {
    if family == Family::Gemma3 && hf.ends_with("norm.weight") {
        -1.0
    } else {
        0.0
    }
}

/// `blk.3.attn_q.weight` → (3, "attn_q", "weight").
fn split_blk(gguf: &str) -> Option<(usize, &str, &str)> {
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    Some((layer, part, kind))
}

/// GGUF name for an HF tensor name (the inverse of [`hf_name`]).
pub fn gguf_name(hf: &str, family: Family) -> Option<String> {
    if family == Family::Gemma3 {
        if let Some(rest) = hf.strip_prefix("model.layers.") {
            let (layer, rest) = rest.split_once('.')?;
            let (module, kind) = rest.rsplit_once('.')?;
            if let Some((g, _)) = GEMMA_NORMS.iter().find(|(_, h)| *h == module) {
                return Some(format!("blk.{layer}.{g}.{kind}"));
            }
        }
    }
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    let part = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{part}.{kind}"))
}

/// llama.cpp stores the q and k projections of `llama` models with the rows of each head
/// interleaved (its RoPE rotates adjacent pairs); HF rotates the two halves of a head. The
/// GGUF row holding HF row `r` of a projection with heads of `head_dim`.
pub fn llama_qk_row(r: usize, head_dim: usize) -> usize {
    let (h, rem) = (r / head_dim, r % head_dim);
    let half = head_dim / 2;
    let (j, i) = (rem / half, rem % half);
    h * head_dim + 2 * i + j
}

fn invalid(f: &GgufFile, field: &str, reason: String) -> FormatError {
    FormatError::InvalidField {
        path: f.path.clone(),
        field: field.into(),
        reason,
    }
}

pub fn spec(f: &GgufFile) -> Result<ModelSpec, FormatError> {
    let arch = f.architecture().ok_or_else(|| FormatError::MissingField {
        path: f.path.clone(),
        field: "general.architecture".into(),
    })?;
    let family = Family::from_model_type(arch).ok_or_else(|| FormatError::UnknownArchitecture {
        path: f.path.clone(),
        model_type: arch.into(),
    })?;
    let key = |k: &str| format!("{arch}.{k}");
    let num = |k: &str| -> Result<Option<u64>, FormatError> {
        match f.get(&key(k)) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                invalid(
                    f,
                    &key(k),
                    format!("expected an integer, got {}", v.summary()),
                )
            }),
        }
    };
    let need = |k: &str| -> Result<usize, FormatError> {
        match num(k)? {
            Some(v) if v > 0 && v < 1 << 32 => Ok(v as usize),
            Some(v) => Err(invalid(f, &key(k), format!("{v} is out of range"))),
            None => Err(FormatError::MissingField {
                path: f.path.clone(),
                field: key(k),
            }),
        }
    };
    let hidden = need("embedding_length")?;
    let heads = need("attention.head_count")?;
    let kv_heads = num("attention.head_count_kv")?
        .map(|v| v as usize)
        .unwrap_or(heads);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(invalid(
            f,
            &key("attention.head_count_kv"),
            format!("{heads} heads cannot share {kv_heads} KV heads"),
        ));
    }
    let head_dim = match num("attention.key_length")? {
        Some(d) => d as usize,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            return Err(invalid(
                f,
                &key("embedding_length"),
                format!("{hidden} is not divisible by {heads} heads"),
            ))
        }
    };
    if head_dim == 0 || head_dim % 2 != 0 || head_dim > 1024 {
        return Err(invalid(
            f,
            &key("attention.key_length"),
            format!("head size {head_dim} is not usable"),
        ));
    }
    let float = |k: &str| f.get(&key(k)).and_then(GgufValue::as_f64);
    let scaling = match f.get(&key("rope.scaling.type")).and_then(GgufValue::as_str) {
        _ if f.tensor("rope_freqs.weight").is_some() => {
            let t = f.tensor("rope_freqs.weight").expect("checked");
            if t.dims != [head_dim as u64 / 2] {
                return Err(invalid(
                    f,
                    "rope_freqs.weight",
                    format!("{:?} values for head size {head_dim}", t.dims),
                ));
            }
            let mut factors = vec![0.0f32; head_dim / 2];
            super::ggml::dequantize(t.ty, t.data.as_slice(), &mut factors);
            if factors.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
                return Err(invalid(
                    f,
                    "rope_freqs.weight",
                    "factors must be positive".into(),
                ));
            }
            RopeScaling::Factors { factors }
        }
        None | Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear {
            factor: float("rope.scaling.factor").unwrap_or(1.0),
        },
        Some(other) => {
            return Err(invalid(
                f,
                &key("rope.scaling.type"),
                format!("`{other}` is not supported"),
            ))
        }
    };
    let gemma = family == Family::Gemma3;
    // llama.cpp's gemma3: every sixth layer global, local RoPE base 10,000 (both fixed in its
    // source), the window from the file.
    let sliding = match num("attention.sliding_window")? {
        Some(w) if gemma && w > 0 => {
            let layers = need("block_count")?;
            let every = num("attention.sliding_window_pattern")?.unwrap_or(6).max(1) as usize;
            Some(Sliding {
                window: w as usize,
                layers: (0..layers).map(|i| (i + 1) % every != 0).collect(),
                rope: RopeConfig {
                    theta: float("rope.local.freq_base").unwrap_or(10000.0),
                    scaling: RopeScaling::None,
                },
            })
        }
        _ => None,
    };
    let vocab = match f.get("tokenizer.ggml.tokens").and_then(GgufValue::as_array) {
        Some(t) => t.len(),
        None => need("vocab_size")?,
    };
    let has = |name: &str| f.tensor(name).is_some();
    let id = |k: &str| {
        f.get(k)
            .and_then(GgufValue::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    let mut eos: Vec<u32> = ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]
        .iter()
        .filter_map(|k| id(k))
        .collect();
    eos.dedup();
    Ok(ModelSpec {
        family,
        hidden_size: hidden,
        intermediate_size: need("feed_forward_length")?,
        num_layers: need("block_count")?,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        vocab_size: vocab,
        max_position_embeddings: num("context_length")?.map(|v| v as usize).unwrap_or(2048),
        rms_norm_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6),
        rope: RopeConfig {
            theta: float("rope.freq_base").unwrap_or(10000.0),
            scaling,
        },
        tie_word_embeddings: !has("output.weight"),
        qkv_bias: has("blk.0.attn_q.bias"),
        o_bias: has("blk.0.attn_output.bias"),
        mlp_bias: has("blk.0.ffn_gate.bias"),
        qk_norm: has("blk.0.attn_q_norm.weight"),
        bos_token_id: id("tokenizer.ggml.bos_token_id"),
        eos_token_ids: eos,
        dtype: Some(match f.get("general.file_type") {
            None => "GGUF, file type not stated".into(),
            Some(v) => match v.as_u64().and_then(file_type_name) {
                Some(name) => format!("{name}, GGUF file_type {}", v.summary()),
                None => format!("GGUF file_type {}", v.summary()),
            },
        }),
        activation: if gemma {
            Activation::GeluTanh
        } else {
            Activation::Silu
        },
        norm_offset: gemma,
        sandwich_norms: gemma,
        scale_embeddings: gemma,
        // llama.cpp's scale for every gemma3 size but 27B (whose query_pre_attn_scalar is
        // hidden / heads, not head_dim).
        attn_scale: gemma.then(|| 1.0 / (head_dim as f64).sqrt()),
        sliding,
        final_logit_softcap: float("final_logit_softcapping").filter(|&c| c > 0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in [
            "token_embd.weight",
            "output.weight",
            "blk.12.attn_k_norm.weight",
            "blk.0.attn_q.bias",
            "blk.3.ffn_down.weight",
        ] {
            for fam in [Family::Llama, Family::Gemma3] {
                assert_eq!(gguf_name(&hf_name(n, fam).unwrap(), fam).unwrap(), n);
            }
        }
        for n in [
            "blk.2.ffn_norm.weight",
            "blk.2.post_attention_norm.weight",
            "blk.2.post_ffw_norm.weight",
        ] {
            let hf = hf_name(n, Family::Gemma3).unwrap();
            assert_eq!(gguf_name(&hf, Family::Gemma3).unwrap(), n);
        }
        assert_eq!(
            hf_name("blk.2.ffn_norm.weight", Family::Llama).unwrap(),
            "model.layers.2.post_attention_layernorm.weight"
        );
        assert_eq!(
            hf_name("blk.2.ffn_norm.weight", Family::Gemma3).unwrap(),
            "model.layers.2.pre_feedforward_layernorm.weight"
        );
        assert_eq!(
            hf_name("blk.1.attn_output.weight", Family::Llama).unwrap(),
            "model.layers.1.self_attn.o_proj.weight"
        );
        assert!(hf_name("rope_freqs.weight", Family::Llama).is_none());
    }

    #[test]
    fn llama_permutation_is_a_bijection_per_head() {
        // head_dim 8: HF rows 0..3 (first half) and 4..7 (second half) interleave in GGUF.
        let rows: Vec<usize> = (0..8).map(|r| llama_qk_row(r, 8)).collect();
        assert_eq!(rows, vec![0, 2, 4, 6, 1, 3, 5, 7]);
        let mut all: Vec<usize> = (0..24).map(|r| llama_qk_row(r, 8)).collect();
        all.sort();
        assert_eq!(all, (0..24).collect::<Vec<_>>());
    }
}

/// The name llama.cpp and its users give a GGUF's `general.file_type` (llama.h's
/// `LLAMA_FTYPE_MOSTLY_*`, as `llama-quantize` lists them): "Q4_K_M" where the file says 15.
/// `None` for a number llama.h does not define (or no longer does).
pub fn file_type_name(n: u64) -> Option<&'static str> {
    Some(match n {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}
