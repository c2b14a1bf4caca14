//! Which storage type each tensor gets. Defaults: vectors (norms, biases) stay F32; every
//! linear layer and the (tied) embedding are Q4. Options keep the embedding/head at another
//! type, and name patterns override anything.

use crate::quant::search::Method;
use crate::quant::QuantType;
use serde::Serialize;

/// What to do with weights that already lie on a 4-bit grid (QAT checkpoints).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QatMode {
    /// Store on-grid blocks exactly, quantize the rest; report the counts.
    Auto,
    /// Fail if any block of a Q4 tensor is off the grid.
    Strict,
    /// Ignore grids: quantize everything with the chosen method.
    Off,
}

#[derive(Clone, Debug, Serialize)]
pub struct Recipe {
    pub linear: QuantType,
    pub embed: QuantType,
    #[serde(serialize_with = "method_name")]
    pub method: Method,
    /// `(pattern, type)`: the first pattern matching a tensor name wins. `*` matches any run
    /// of characters, `?` one character.
    pub overrides: Vec<(String, QuantType)>,
    pub qat: QatMode,
    /// A GGUF source's quantized blocks are stored as they are (`QuantType::Ggml`), bit for
    /// bit, instead of re-quantized to `linear`/`embed` (`pocket export X.gguf` without
    /// `--quant`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub keep_source_blocks: bool,
    /// The activation statistics the Q4 search was weighted with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationInfo>,
    /// Export tensors holding NaN or infinity instead of refusing them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_nonfinite: bool,
    /// Set when the types were chosen to fit a size (`--size`, `--bpw`): the choice is in
    /// `overrides`, one exact tensor name each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetInfo>,
    /// Q4 weights take GPTQ's error compensation over the calibration activations
    /// (`quant::gptq`, `--gptq`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gptq: bool,
}

/// How a size-budget choice was made (`pocket export --size`), recorded in the file.
#[derive(Clone, Debug, Serialize)]
pub struct BudgetInfo {
    /// The file size asked for, in bytes.
    pub target_bytes: u64,
    /// The types chosen from.
    pub candidates: Vec<QuantType>,
    /// The sum of the chosen types' estimated KL divergences from the source.
    pub predicted_kl: f64,
    /// Calibration tokens each tensor's sensitivity was measured on.
    pub tokens: usize,
}

/// Where calibration activations came from.
#[derive(Clone, Debug, Serialize)]
pub struct CalibrationInfo {
    /// `builtin` or the text file's path.
    pub text: String,
    pub tokens: usize,
}

fn method_name<S: serde::Serializer>(m: &Method, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match m {
        Method::Rtn => "rtn",
        Method::Search => "search",
    })
}

/// The embedding/head type that goes with `linear` when none is asked for. With the default
/// asymmetric block-64 Q4, the embedding is symmetric block-32 Q4: the same 4.5 bits per
/// weight, but embedding rows are centred on zero (a zero point buys little) and a scale per
/// 32 values follows them more closely. Measured on SmolLM2-135M (docs/quantization.md): equal
/// or lower KL divergence, and the greedy answers that block-64 embeddings lose come back.
pub fn default_embed(linear: QuantType) -> QuantType {
    match linear {
        QuantType::Q4 {
            block: 64,
            sym: false,
        } => QuantType::Q4 {
            block: 32,
            sym: true,
        },
        other => other,
    }
}

impl Default for Recipe {
    fn default() -> Self {
        let q4 = QuantType::Q4 {
            block: 64,
            sym: false,
        };
        Recipe {
            linear: q4,
            embed: default_embed(q4),
            method: Method::Search,
            overrides: Vec::new(),
            qat: QatMode::Auto,
            keep_source_blocks: false,
            calibration: None,
            allow_nonfinite: false,
            budget: None,
            gptq: false,
        }
    }
}

impl Recipe {
    /// Whether any tensor may be searched as Q4, ggml's 5-bit types or IQ4_NL (so
    /// calibration can help).
    pub fn searches_q4(&self) -> bool {
        self.method == Method::Search
            && self.qat != QatMode::Strict
            && self.any_type(|t| !matches!(t, QuantType::Q8 { .. }) && t.is_compensable())
    }

    /// Whether `--gptq` has a tensor to compensate: any Q4, Q8, ggml 5-bit or IQ4 one.
    pub fn compensable(&self) -> bool {
        self.any_type(|t| t.is_compensable())
    }

    /// Whether any type the recipe may write (the linear and embedding defaults, each
    /// override) satisfies `pred`.
    fn any_type(&self, pred: impl Fn(&QuantType) -> bool) -> bool {
        [self.linear, self.embed]
            .iter()
            .chain(self.overrides.iter().map(|(_, t)| t))
            .any(pred)
    }

    /// The storage type for a tensor and, if the wanted type does not fit its shape, a note
    /// saying what was used instead.
    pub fn storage_for(&self, name: &str, shape: &[usize]) -> (QuantType, Option<String>) {
        let wanted = match self.overrides.iter().find(|(p, _)| glob_match(p, name)) {
            Some((_, t)) => *t,
            None if shape.len() != 2 => QuantType::F32,
            None if is_embedding_or_head(name) => self.embed,
            None => self.linear,
        };
        let (rows, cols) = match shape {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            _ => {
                return (
                    QuantType::F32,
                    Some(format!("{}-D tensor kept as f32", shape.len())),
                )
            }
        };
        if wanted.byte_size(rows, cols).is_some() {
            return (wanted, None);
        }
        let mut fallbacks = Vec::new();
        if let QuantType::Q4 { sym, .. } = wanted {
            fallbacks.extend([64, 32].map(|block| QuantType::Q4 { block, sym }));
        }
        // IQ4_XS's super-blocks are 256 wide: IQ4_NL is the same table in blocks of 32.
        if wanted == QuantType::Ggml(crate::gguf::GgmlType::IQ4XS) {
            fallbacks.push(QuantType::Ggml(crate::gguf::GgmlType::IQ4NL));
        }
        fallbacks.extend([
            QuantType::Q8 {
                block: crate::quant::Q8_BLOCK,
            },
            QuantType::F16,
        ]);
        let used = fallbacks
            .into_iter()
            .find(|t| t.byte_size(rows, cols).is_some())
            .unwrap_or(QuantType::F32);
        (
            used,
            Some(format!(
                "{cols} columns do not fit {wanted}: stored as {used}"
            )),
        )
    }
}

pub fn is_embedding_or_head(name: &str) -> bool {
    name.ends_with("embed_tokens.weight") || name == "lm_head.weight"
}

/// Shell-style match with `*` and `?` (no character classes).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_overrides_and_fallbacks() {
        let mut r = Recipe::default();
        let q4 = QuantType::Q4 {
            block: 64,
            sym: false,
        };
        assert_eq!(r.storage_for("model.norm.weight", &[896]).0, QuantType::F32);
        assert_eq!(
            r.storage_for("model.layers.0.self_attn.q_proj.bias", &[896])
                .0,
            QuantType::F32
        );
        // The default embedding: symmetric block-32 Q4, the same bits per weight.
        assert_eq!(
            r.storage_for("model.embed_tokens.weight", &[100, 896]).0,
            QuantType::Q4 {
                block: 32,
                sym: true
            }
        );
        assert_eq!(
            r.storage_for("model.layers.3.mlp.down_proj.weight", &[896, 2560])
                .0,
            q4
        );
        r.embed = QuantType::Q8 { block: 64 };
        r.overrides.push(("*.layers.0.*".into(), QuantType::F16));
        assert_eq!(
            r.storage_for("model.embed_tokens.weight", &[100, 896]).0,
            QuantType::Q8 { block: 64 }
        );
        assert_eq!(
            r.storage_for("model.layers.0.mlp.up_proj.weight", &[10, 64])
                .0,
            QuantType::F16
        );
        assert_eq!(
            r.storage_for("model.layers.10.mlp.up_proj.weight", &[10, 64])
                .0,
            q4
        );
        // 96 columns: not a multiple of 64 → block 32.
        let (t, note) = r.storage_for("x.weight", &[4, 96]);
        assert_eq!(
            t,
            QuantType::Q4 {
                block: 32,
                sym: false
            }
        );
        assert!(note.unwrap().contains("96 columns"));
        assert_eq!(r.storage_for("x.weight", &[4, 30]).0, QuantType::F16);
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.mlp.*", "model.layers.1.mlp.down_proj.weight"));
        assert!(glob_match(
            "model.layers.?.self_attn*",
            "model.layers.3.self_attn.q_proj.weight"
        ));
        assert!(!glob_match(
            "model.layers.?.self_attn*",
            "model.layers.13.self_attn.q_proj.weight"
        ));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b", "acbx"));
    }
}
