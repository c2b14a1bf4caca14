//! `config.json` and `generation_config.json` → [`ModelSpec`], the architecture facts the
//! engine needs, normalised across model families and transformers versions.
//!
//! transformers 4 writes `rope_theta` + `rope_scaling` and `torch_dtype`; transformers 5 writes
//! `rope_parameters` (theta and scaling in one object) and `dtype`. Both are read here so the
//! rest of pocket never sees the difference.

use super::json::{read_json, Fields};
use crate::FormatError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The decoder families pocket runs. One decoder serves all three; these switch its details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Llama / SmolLM: optional biases (`attention_bias`, `mlp_bias`).
    Llama,
    /// Qwen2 / Qwen2.5: q, k and v projections always carry a bias; o does not.
    Qwen2,
    /// Qwen3: per-head RMSNorm on q and k before RoPE (`q_norm`, `k_norm`).
    Qwen3,
    /// Gemma 3 text decoders (`gemma3_text`): (1 + w) norms around attention and MLP, GELU,
    /// scaled embeddings, sliding-window layers with their own RoPE.
    Gemma3,
}

impl Family {
    pub fn from_model_type(model_type: &str) -> Option<Family> {
        match model_type {
            "llama" => Some(Family::Llama),
            "qwen2" => Some(Family::Qwen2),
            "qwen3" => Some(Family::Qwen3),
            "gemma3_text" | "gemma3" => Some(Family::Gemma3),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma3 => "gemma3_text",
        }
    }
}

/// How positions are turned into rotation frequencies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (transformers' "linear").
    Linear {
        factor: f64,
    },
    /// Llama 3.1/3.2's wavelength-dependent smoothing of the inverse frequencies.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
    /// Inverse frequency `i` divided by `factors[i]` (how GGUF files carry Llama 3 scaling:
    /// the `rope_freqs.weight` tensor).
    Factors {
        factors: Vec<f32>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeConfig {
    pub theta: f64,
    pub scaling: RopeScaling,
}

impl RopeConfig {
    /// The inverse frequencies in f32, as transformers computes them (`1 / theta^(2i/d)`,
    /// then the scaling rule): the engine rotates with them and the MNN export stores them.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        let cfg = self;
        let half = head_dim / 2;
        let base = cfg.theta as f32;
        let mut inv_freq: Vec<f32> = (0..half)
            .map(|i| 1.0 / base.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        match cfg.scaling {
            RopeScaling::None => {}
            RopeScaling::Factors { ref factors } => {
                for (f, d) in inv_freq.iter_mut().zip(factors) {
                    *f /= d;
                }
            }
            RopeScaling::Linear { factor } => {
                for f in &mut inv_freq {
                    *f /= factor as f32;
                }
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let (factor, low, high) = (
                    factor as f32,
                    low_freq_factor as f32,
                    high_freq_factor as f32,
                );
                let old_len = original_max_position_embeddings as f32;
                let low_freq_wavelen = old_len / low;
                let high_freq_wavelen = old_len / high;
                for f in &mut inv_freq {
                    let wavelen = 2.0 * std::f32::consts::PI / *f;
                    let scaled = if wavelen > low_freq_wavelen {
                        *f / factor
                    } else {
                        *f
                    };
                    let medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
                    *f = if medium {
                        let smooth = (old_len / wavelen - low) / (high - low);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    } else {
                        scaled
                    };
                }
            }
        }
        inv_freq
    }
}

/// The MLP's gate activation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    #[default]
    Silu,
    /// GELU with the tanh approximation (transformers' `gelu_pytorch_tanh`).
    GeluTanh,
}

/// Sliding-window attention on some layers (Gemma 3's local layers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sliding {
    /// A position attends itself and the `window − 1` before it.
    pub window: usize,
    /// Per layer: true for a sliding-window layer.
    pub layers: Vec<bool>,
    /// The RoPE of the sliding layers (the others use [`ModelSpec::rope`]).
    pub rope: RopeConfig,
}

/// Everything the engine needs to know about a decoder's shape and conventions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub family: Family,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub rope: RopeConfig,
    pub tie_word_embeddings: bool,
    /// Bias on the q, k and v projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// Bias on gate, up and down.
    pub mlp_bias: bool,
    /// Per-head RMSNorm on q and k (Qwen3).
    pub qk_norm: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// The checkpoint's declared storage dtype (`torch_dtype` or `dtype`), for information.
    pub dtype: Option<String>,
    // Gemma's switches; absent (the defaults) in files written before they existed.
    /// The MLP's gate activation.
    #[serde(default)]
    pub activation: Activation,
    /// Every RMSNorm scales by `1 + w` (Gemma) instead of `w`.
    #[serde(default)]
    pub norm_offset: bool,
    /// The attention and MLP outputs are normed again before the residual add
    /// (`post_attention_layernorm` / `post_feedforward_layernorm`; the MLP's input norm is then
    /// `pre_feedforward_layernorm`).
    #[serde(default)]
    pub sandwich_norms: bool,
    /// Embeddings are multiplied by sqrt(hidden_size).
    #[serde(default)]
    pub scale_embeddings: bool,
    /// The softmax scale when it is not 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-½).
    #[serde(default)]
    pub attn_scale: Option<f64>,
    #[serde(default)]
    pub sliding: Option<Sliding>,
    /// Logits become `cap · tanh(logits / cap)`.
    #[serde(default)]
    pub final_logit_softcap: Option<f64>,
}

impl ModelSpec {
    /// Sizes no real decoder of this kind comes near; a file claiming more is refused before
    /// anything is sized from it (`num_hidden_layers: 2^60` would otherwise size a vector).
    pub fn check_limits(&self) -> Result<(), String> {
        let limits: [(&str, usize, usize); 8] = [
            ("hidden_size", self.hidden_size, 1 << 16),
            ("intermediate_size", self.intermediate_size, 1 << 18),
            ("num_hidden_layers", self.num_layers, 1 << 10),
            ("num_attention_heads", self.num_heads, 1 << 10),
            ("num_key_value_heads", self.num_kv_heads, 1 << 10),
            ("head_dim", self.head_dim, 1 << 10),
            ("vocab_size", self.vocab_size, 1 << 22),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                1 << 24,
            ),
        ];
        for (field, v, max) in limits {
            if v == 0 || v > max {
                return Err(format!("{field} = {v} is outside 1..={max}"));
            }
        }
        if self.num_heads % self.num_kv_heads != 0 {
            return Err(format!(
                "{} attention heads are not a multiple of {} key/value heads",
                self.num_heads, self.num_kv_heads
            ));
        }
        if let Some(sl) = &self.sliding {
            if sl.window == 0 || sl.layers.len() != self.num_layers {
                return Err(format!(
                    "sliding window {} over {} layer types does not fit {} layers",
                    sl.window,
                    sl.layers.len(),
                    self.num_layers
                ));
            }
        }
        for (field, v) in [
            ("query_pre_attn_scalar", self.attn_scale),
            ("final_logit_softcapping", self.final_logit_softcap),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(format!("{field} must be a positive number"));
            }
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err(format!(
                "rms_norm_eps = {} is not a finite non-negative number",
                self.rms_norm_eps
            ));
        }
        Ok(())
    }

    /// Reads `config.json`.
    pub fn from_file(path: &Path) -> Result<ModelSpec, FormatError> {
        let value = read_json(path)?;
        ModelSpec::from_json(path, &value)
    }

    /// [`ModelSpec::parse_json`], then [`ModelSpec::check_limits`].
    pub fn from_json(path: &Path, value: &serde_json::Value) -> Result<ModelSpec, FormatError> {
        let spec = ModelSpec::parse_json(path, value)?;
        spec.check_limits().map_err(|reason| FormatError::Invalid {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(spec)
    }

    /// Parses a config already in memory; `path` is only used in error messages.
    fn parse_json(path: &Path, value: &serde_json::Value) -> Result<ModelSpec, FormatError> {
        let f = Fields::new(path, value)?;
        let model_type = f
            .opt_str("model_type")?
            .ok_or_else(|| FormatError::MissingField {
                path: path.to_path_buf(),
                field: "model_type".into(),
            })?;
        let family = Family::from_model_type(model_type).ok_or_else(|| {
            FormatError::UnknownArchitecture {
                path: path.to_path_buf(),
                model_type: model_type.to_string(),
            }
        })?;
        let invalid = |field: &str, reason: String| FormatError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            reason,
        };

        let hidden_size = f.usize("hidden_size")?;
        let num_heads = f.usize("num_attention_heads")?;
        let num_kv_heads = f.opt_usize("num_key_value_heads")?.unwrap_or(num_heads);
        if hidden_size == 0 || num_heads == 0 || num_kv_heads == 0 || num_heads % num_kv_heads != 0
        {
            return Err(invalid(
                "num_key_value_heads",
                format!("{num_heads} heads cannot be shared by {num_kv_heads} KV heads (hidden {hidden_size})"),
            ));
        }
        let head_dim = match f.opt_usize("head_dim")? {
            Some(d) => d,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(invalid(
                    "hidden_size",
                    format!(
                    "{hidden_size} is not divisible by {num_heads} heads and no head_dim is given"
                ),
                ))
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(invalid(
                "head_dim",
                format!("{head_dim} must be even and non-zero for RoPE"),
            ));
        }
        let act_field = match f.get("hidden_activation") {
            Some(_) => "hidden_activation",
            None => "hidden_act",
        };
        let activation = match f.opt_str(act_field)? {
            None if family == Family::Gemma3 => Activation::GeluTanh,
            None | Some("silu") => Activation::Silu,
            Some("gelu_pytorch_tanh") => Activation::GeluTanh,
            Some(act) => {
                return Err(invalid(
                    act_field,
                    format!("`{act}` is not supported (silu, gelu_pytorch_tanh)"),
                ))
            }
        };
        for field in ["attn_logit_softcapping", "use_bidirectional_attention"] {
            if f.get(field).is_some_and(|v| v != &serde_json::json!(false)) {
                return Err(invalid(field, "is not supported".into()));
            }
        }
        if f.opt_bool("use_sliding_window")?.unwrap_or(false) {
            return Err(invalid(
                "use_sliding_window",
                "sliding-window attention is not supported".into(),
            ));
        }

        let attention_bias = f.opt_bool("attention_bias")?.unwrap_or(false);
        let (qkv_bias, o_bias, mlp_bias, qk_norm) = match family {
            Family::Llama => (
                attention_bias,
                attention_bias,
                f.opt_bool("mlp_bias")?.unwrap_or(false),
                false,
            ),
            Family::Qwen2 => (true, false, false, false),
            Family::Qwen3 | Family::Gemma3 => (attention_bias, attention_bias, false, true),
        };
        let gemma = family == Family::Gemma3;
        let default_positions = match family {
            Family::Llama => 2048,
            Family::Qwen2 | Family::Qwen3 => 32768,
            Family::Gemma3 => 131072,
        };
        let positive = |field: &str| -> Result<usize, FormatError> {
            let v = f.usize(field)?;
            if v == 0 {
                return Err(invalid(field, "must be greater than zero".into()));
            }
            Ok(v)
        };

        Ok(ModelSpec {
            family,
            hidden_size,
            intermediate_size: positive("intermediate_size")?,
            num_layers: positive("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size: positive("vocab_size")?,
            max_position_embeddings: f
                .opt_usize("max_position_embeddings")?
                .unwrap_or(default_positions),
            rms_norm_eps: f.opt_f64("rms_norm_eps")?.unwrap_or(1e-6),
            rope: if gemma {
                read_rope_of(&f, "full_attention", "rope_theta", 1e6)?
            } else {
                read_rope(&f)?
            },
            tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(gemma),
            qkv_bias,
            o_bias,
            mlp_bias,
            qk_norm,
            bos_token_id: f.token_ids("bos_token_id")?.first().copied(),
            eos_token_ids: f.token_ids("eos_token_id")?,
            dtype: f
                .opt_str("dtype")?
                .or(f.opt_str("torch_dtype")?)
                .map(str::to_string),
            activation,
            norm_offset: gemma,
            sandwich_norms: gemma,
            scale_embeddings: gemma,
            attn_scale: match f.opt_f64("query_pre_attn_scalar")? {
                Some(q) if gemma => Some(1.0 / q.sqrt()),
                None if gemma => Some(1.0 / 256f64.sqrt()),
                _ => None,
            },
            sliding: if gemma { read_sliding(&f)? } else { None },
            final_logit_softcap: f.opt_f64("final_logit_softcapping")?,
        })
    }

    /// The softmax scale of attention scores.
    pub fn attn_scale(&self) -> f32 {
        match self.attn_scale {
            Some(s) => s as f32,
            None => 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    /// The sliding window of `layer`, if it is a sliding-window layer.
    pub fn window(&self, layer: usize) -> Option<usize> {
        let sl = self.sliding.as_ref()?;
        sl.layers
            .get(layer)
            .copied()
            .unwrap_or(false)
            .then_some(sl.window)
    }

    /// Number of query heads that share one KV head.
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// Gemma 3's layer kinds (`layer_types`, or every `sliding_window_pattern`-th layer global)
/// and the window and RoPE of its sliding layers.
fn read_sliding(f: &Fields) -> Result<Option<Sliding>, FormatError> {
    let invalid = |field: &str, reason: &str| FormatError::InvalidField {
        path: f.path.to_path_buf(),
        field: field.into(),
        reason: reason.into(),
    };
    let n = f.usize("num_hidden_layers")?;
    let layers: Vec<bool> = match f.get("layer_types") {
        Some(serde_json::Value::Array(kinds)) => kinds
            .iter()
            .map(|k| match k.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(invalid(
                    "layer_types",
                    "expected \"sliding_attention\" or \"full_attention\"",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid("layer_types", "expected a list")),
        None => {
            let every = f.opt_usize("sliding_window_pattern")?.unwrap_or(6).max(1);
            (0..n).map(|i| (i + 1) % every != 0).collect()
        }
    };
    if layers.len() != n {
        return Err(invalid("layer_types", "needs one entry per layer"));
    }
    if !layers.contains(&true) {
        return Ok(None);
    }
    let window = f
        .opt_usize("sliding_window")?
        .filter(|&w| w > 0)
        .ok_or_else(|| invalid("sliding_window", "sliding layers need a window > 0"))?;
    let rope = read_rope_of(f, "sliding_attention", "rope_local_base_freq", 1e4)?;
    Ok(Some(Sliding {
        window,
        layers,
        rope,
    }))
}

/// The RoPE of one of Gemma 3's layer kinds: `rope_parameters[kind]` (transformers 5), or
/// `theta_key` + (global layers only) `rope_scaling` (transformers 4).
fn read_rope_of(
    f: &Fields,
    kind: &str,
    theta_key: &str,
    default_theta: f64,
) -> Result<RopeConfig, FormatError> {
    if let Some(params) = f.object("rope_parameters")? {
        if let Some(p) = params.object(kind)? {
            return rope_from(
                f,
                Some(&p),
                p.opt_f64("rope_theta")?.unwrap_or(default_theta),
            );
        }
    }
    let scaling = match kind {
        "full_attention" => f.object("rope_scaling")?,
        _ => None,
    };
    let theta = f.opt_f64(theta_key)?.unwrap_or(default_theta);
    rope_from(f, scaling.as_ref(), theta)
}

/// RoPE from either `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (4).
fn read_rope(f: &Fields) -> Result<RopeConfig, FormatError> {
    let params = f.object("rope_parameters")?;
    let scaling = match &params {
        Some(p) => Some(Fields {
            path: p.path,
            obj: p.obj,
        }),
        None => f.object("rope_scaling")?,
    };
    let theta = match &params {
        Some(p) => p.opt_f64("rope_theta")?,
        None => None,
    }
    .or(f.opt_f64("rope_theta")?)
    .unwrap_or(10000.0);
    rope_from(f, scaling.as_ref(), theta)
}

/// RoPE of base `theta`, scaled as the object `scaling` says (`rope_type`; none: default).
fn rope_from(f: &Fields, scaling: Option<&Fields>, theta: f64) -> Result<RopeConfig, FormatError> {
    if theta <= 1.0 {
        return Err(FormatError::InvalidField {
            path: f.path.to_path_buf(),
            field: "rope_theta".into(),
            reason: format!("{theta} must be greater than 1"),
        });
    }
    let scaling = match scaling {
        None => RopeScaling::None,
        Some(s) => {
            let kind = match s.opt_str("rope_type")? {
                Some(k) => Some(k),
                None => s.opt_str("type")?,
            };
            let factor = || -> Result<f64, FormatError> {
                s.opt_f64("factor")?
                    .ok_or_else(|| FormatError::MissingField {
                        path: f.path.to_path_buf(),
                        field: "rope_scaling.factor".into(),
                    })
            };
            match kind.unwrap_or("default") {
                "default" => RopeScaling::None,
                "linear" => RopeScaling::Linear { factor: factor()? },
                "llama3" => RopeScaling::Llama3 {
                    factor: factor()?,
                    low_freq_factor: s.opt_f64("low_freq_factor")?.unwrap_or(1.0),
                    high_freq_factor: s.opt_f64("high_freq_factor")?.unwrap_or(4.0),
                    original_max_position_embeddings: s
                        .opt_usize("original_max_position_embeddings")?
                        .unwrap_or(8192),
                },
                other => {
                    return Err(FormatError::InvalidField {
                        path: f.path.to_path_buf(),
                        field: "rope_scaling".into(),
                        reason: format!(
                            "rope type `{other}` is not supported (default, linear, llama3)"
                        ),
                    })
                }
            }
        }
    };
    Ok(RopeConfig { theta, scaling })
}

/// `generation_config.json`: the model author's decoding defaults and stop tokens.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationConfig {
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub do_sample: Option<bool>,
    pub temperature: Option<f64>,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub max_new_tokens: Option<usize>,
}

impl GenerationConfig {
    pub fn from_file(path: &Path) -> Result<GenerationConfig, FormatError> {
        let value = read_json(path)?;
        let f = Fields::new(path, &value)?;
        Ok(GenerationConfig {
            bos_token_id: f.token_ids("bos_token_id")?.first().copied(),
            eos_token_ids: f.token_ids("eos_token_id")?,
            do_sample: f.opt_bool("do_sample")?,
            temperature: f.opt_f64("temperature")?,
            top_k: f.opt_usize("top_k")?,
            top_p: f.opt_f64("top_p")?,
            min_p: f.opt_f64("min_p")?,
            repetition_penalty: f.opt_f64("repetition_penalty")?,
            max_new_tokens: f.opt_usize("max_new_tokens")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<ModelSpec, FormatError> {
        ModelSpec::from_json(Path::new("config.json"), &v)
    }

    fn base() -> serde_json::Value {
        json!({"model_type": "qwen3", "hidden_size": 896, "intermediate_size": 2560,
               "num_hidden_layers": 28, "num_attention_heads": 14, "num_key_value_heads": 2,
               "head_dim": 64, "vocab_size": 65536, "rms_norm_eps": 1e-6,
               "tie_word_embeddings": true, "eos_token_id": [1, 2]})
    }

    #[test]
    fn transformers4_and_5_rope_keys_agree() {
        let mut v4 = base();
        v4["rope_theta"] = json!(1000000.0);
        v4["torch_dtype"] = json!("bfloat16");
        let mut v5 = base();
        v5["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 1000000.0});
        v5["dtype"] = json!("bfloat16");
        let (a, b) = (parse(v4).unwrap(), parse(v5).unwrap());
        assert_eq!(a, b);
        assert_eq!(a.rope.theta, 1e6);
        assert_eq!(a.dtype.as_deref(), Some("bfloat16"));
        assert!(a.qk_norm && a.tie_word_embeddings);
        assert_eq!(a.eos_token_ids, vec![1, 2]);
    }

    #[test]
    fn llama3_scaling_from_either_style() {
        let mut v = base();
        v["model_type"] = json!("llama");
        v["rope_scaling"] = json!({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let spec = parse(v).unwrap();
        assert!(matches!(spec.rope.scaling, RopeScaling::Llama3 { factor, .. } if factor == 32.0));
    }

    #[test]
    fn errors_name_file_and_field() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("hidden_size");
        let e = parse(v).unwrap_err().to_string();
        assert_eq!(e, "config.json: missing field `hidden_size`");

        let mut v = base();
        v["model_type"] = json!("gpt_neox");
        let e = parse(v).unwrap_err().to_string();
        assert!(e.contains("unsupported model_type `gpt_neox`"), "{e}");

        let mut v = base();
        v["num_key_value_heads"] = json!(3);
        assert!(parse(v).is_err());

        let mut v = base();
        v["rope_scaling"] = json!({"type": "yarn", "factor": 4.0});
        assert!(parse(v).unwrap_err().to_string().contains("yarn"));
    }

    #[test]
    fn family_switches() {
        let mut v = base();
        v["model_type"] = json!("qwen2");
        v.as_object_mut().unwrap().remove("head_dim");
        let s = parse(v).unwrap();
        assert!(s.qkv_bias && !s.o_bias && !s.qk_norm);
        assert_eq!(s.head_dim, 64);
        assert_eq!(s.group_size(), 7);
    }

    /// Gemma 3 in transformers 5 style (`rope_parameters` per layer kind, `layer_types`) and
    /// in 4 style (`rope_theta`, `rope_local_base_freq`, `sliding_window_pattern`) agree.
    #[test]
    fn gemma3_in_either_style() {
        let common = json!({"model_type": "gemma3_text", "hidden_size": 640,
            "intermediate_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 1000,
            "query_pre_attn_scalar": 256, "sliding_window": 512});
        let mut v5 = common.clone();
        v5["layer_types"] = json!([
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention"
        ]);
        v5["rope_parameters"] = json!({
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}});
        let mut v4 = common.clone();
        v4["sliding_window_pattern"] = json!(6);
        v4["rope_theta"] = json!(1e6);
        v4["rope_local_base_freq"] = json!(1e4);
        v4["rope_scaling"] = json!({"rope_type": "linear", "factor": 8.0});
        let (a, b) = (parse(v5).unwrap(), parse(v4).unwrap());
        assert_eq!(a, b);
        assert_eq!(a.activation, Activation::GeluTanh);
        assert!(a.norm_offset && a.sandwich_norms && a.scale_embeddings && a.tie_word_embeddings);
        assert_eq!(a.rope.scaling, RopeScaling::Linear { factor: 8.0 });
        let sl = a.sliding.as_ref().unwrap();
        assert_eq!((sl.window, sl.rope.theta), (512, 1e4));
        assert_eq!(sl.rope.scaling, RopeScaling::None);
        assert_eq!(
            (0..6).map(|i| a.window(i)).collect::<Vec<_>>(),
            [Some(512), Some(512), Some(512), Some(512), Some(512), None]
        );
        assert_eq!(a.attn_scale(), 1.0 / 16.0);

        for (field, value, says) in [
            (
                "layer_types",
                json!(["full_attention"]),
                "one entry per layer",
            ),
            ("sliding_window", json!(0), "window > 0"),
            ("attn_logit_softcapping", json!(50.0), "not supported"),
            ("use_bidirectional_attention", json!(true), "not supported"),
            (
                "hidden_activation",
                json!("gelu"),
                "`gelu` is not supported",
            ),
            ("final_logit_softcapping", json!(-1.0), "positive"),
        ] {
            let mut v = common.clone();
            v[field] = value;
            let e = parse(v).unwrap_err().to_string();
            assert!(
                e.starts_with("config.json: ") && e.contains(says),
                "{field}: {e}"
            );
        }
    }
}
