//! Storage types and block codecs: how a weight matrix is encoded, and the scalar
//! quantize/dequantize definitions every faster kernel must reproduce.
//!
//! Quantized types work on row-major `[rows, cols]` matrices in blocks along a row (the input
//! dimension of a linear layer). A tensor's bytes are laid out in planes: first every row's
//! codes, then every row's block parameters — the layout MNN's own LLM export uses, so an MNN
//! package can later be written by copying.

pub mod dense;
pub mod gptq;
pub mod params;
pub mod q4;
pub mod q8;
pub mod qat;
pub mod rows16;
pub mod search;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use crate::gguf::GgmlType;

/// How one tensor is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum QuantType {
    F32,
    F16,
    BF16,
    /// Symmetric 8-bit, one f16 scale per block: `w = q · scale`, q in -127..=127.
    Q8 {
        block: usize,
    },
    /// 4-bit, per block: asymmetric `w = (q − 8) · scale + zero` with an f16 (zero, scale) pair,
    /// or symmetric `w = (q − 8) · scale` with one f16 scale. q in 0..=15.
    Q4 {
        block: usize,
        sym: bool,
    },
    /// A GGUF's quantized blocks kept bit for bit (`pocket export` of a GGUF), rows in logical
    /// order; the engine packs them for its kernels at load, value for value.
    Ggml(GgmlType),
}

pub const Q4_BLOCKS: [usize; 3] = [32, 64, 128];
pub const Q8_BLOCK: usize = 64;

impl QuantType {
    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            QuantType::Q8 { .. } | QuantType::Q4 { .. } | QuantType::Ggml(_)
        )
    }

    /// Whether `--gptq` can compensate a tensor of this type: pocket's Q4 and Q8 blocks and
    /// the ggml types it searches ([`GgmlType::is_searched`]).
    pub fn is_compensable(self) -> bool {
        match self {
            QuantType::Q4 { .. } | QuantType::Q8 { .. } => true,
            QuantType::Ggml(t) => t.is_searched(),
            _ => false,
        }
    }

    /// Block length along a row, for quantized types.
    pub fn block(self) -> Option<usize> {
        match self {
            QuantType::Q8 { block } | QuantType::Q4 { block, .. } => Some(block),
            QuantType::Ggml(t) if t.block().0 > 1 => Some(t.block().0),
            _ => None,
        }
    }

    /// Bytes a `[rows, cols]` tensor takes, or `None` if the shape does not fit the type
    /// (columns not a multiple of the block) or the size overflows.
    pub fn byte_size(self, rows: usize, cols: usize) -> Option<usize> {
        let n = rows.checked_mul(cols)?;
        match self {
            QuantType::F32 => n.checked_mul(4),
            QuantType::F16 | QuantType::BF16 => n.checked_mul(2),
            QuantType::Q8 { block } => {
                (cols % block == 0).then_some(())?;
                n.checked_add(rows.checked_mul(cols / block)?.checked_mul(2)?)
            }
            QuantType::Q4 { block, sym } => {
                (cols % block == 0 && cols % 2 == 0).then_some(())?;
                let params = if sym { 2 } else { 4 };
                (n / 2).checked_add(rows.checked_mul(cols / block)?.checked_mul(params)?)
            }
            QuantType::Ggml(t) => {
                let row = t.bytes_for(cols as u64)?;
                usize::try_from(row.checked_mul(rows as u64)?).ok()
            }
        }
    }

    /// Average bits per weight.
    pub fn bits_per_weight(self) -> f64 {
        match self {
            QuantType::F32 => 32.0,
            QuantType::F16 | QuantType::BF16 => 16.0,
            QuantType::Q8 { block } => 8.0 + 16.0 / block as f64,
            QuantType::Q4 { block, sym } => 4.0 + if sym { 16.0 } else { 32.0 } / block as f64,
            QuantType::Ggml(t) => t.block().1 as f64 * 8.0 / t.block().0 as f64,
        }
    }
}

impl fmt::Display for QuantType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantType::F32 => write!(f, "f32"),
            QuantType::F16 => write!(f, "f16"),
            QuantType::BF16 => write!(f, "bf16"),
            QuantType::Q8 { block } => write!(f, "q8_b{block}"),
            QuantType::Q4 { block, sym } => {
                write!(f, "q4{}_b{block}", if *sym { "s" } else { "a" })
            }
            QuantType::Ggml(t) => write!(f, "ggml_{}", t.name().to_lowercase()),
        }
    }
}

impl FromStr for QuantType {
    type Err = String;

    /// Canonical names (`q4a_b64`, `q4s_b32`, `q8_b64`, `f16`, `ggml_q5_0`, …) and the short
    /// forms `q4` (asymmetric, block 64), `q8`, `q5_0` and `q5_1`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("unknown storage type `{s}` (f32, f16, bf16, q8, q4, q4a_b32|64|128, q4s_b32|64|128, iq4_nl, iq4_xs, q5_0, q5_1)")
        };
        Ok(match s {
            "f32" => QuantType::F32,
            "f16" => QuantType::F16,
            "bf16" => QuantType::BF16,
            "q8" | "q8_b64" => QuantType::Q8 { block: Q8_BLOCK },
            // ggml's 5-bit types and its non-uniform IQ4_NL, which pocket writes with its
            // calibrated search.
            "q5_0" => QuantType::Ggml(GgmlType::Q5_0),
            "q5_1" => QuantType::Ggml(GgmlType::Q5_1),
            "iq4_nl" => QuantType::Ggml(GgmlType::IQ4NL),
            "iq4_xs" => QuantType::Ggml(GgmlType::IQ4XS),
            "q4" => QuantType::Q4 {
                block: 64,
                sym: false,
            },
            _ if s.starts_with("ggml_") => {
                let t = GgmlType::from_name(&s[5..]).ok_or_else(bad)?;
                if t.block().0 == 1 {
                    return Err(bad()); // dense types are f32/f16/bf16
                }
                QuantType::Ggml(t)
            }
            _ => {
                let rest = s.strip_prefix("q4").ok_or_else(bad)?;
                let (sym, rest) = match rest.split_at_checked(1) {
                    Some(("a", r)) => (false, r),
                    Some(("s", r)) => (true, r),
                    _ => return Err(bad()),
                };
                let block: usize = rest
                    .strip_prefix("_b")
                    .and_then(|b| b.parse().ok())
                    .ok_or_else(bad)?;
                if !Q4_BLOCKS.contains(&block) {
                    return Err(bad());
                }
                QuantType::Q4 { block, sym }
            }
        })
    }
}

impl TryFrom<String> for QuantType {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<QuantType> for String {
    fn from(q: QuantType) -> String {
        q.to_string()
    }
}

/// Quantization error of one tensor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    /// sqrt(Σ(w − ŵ)² / Σw²)
    pub rel_rms: f64,
    pub max_abs: f64,
    pub sum_sq_err: f64,
    pub sum_sq: f64,
}

impl ErrorStats {
    pub fn of(original: &[f32], decoded: &[f32]) -> ErrorStats {
        let mut s = ErrorStats::default();
        for (&a, &b) in original.iter().zip(decoded) {
            let e = (a - b) as f64;
            s.sum_sq_err += e * e;
            s.sum_sq += a as f64 * a as f64;
            s.max_abs = s.max_abs.max(e.abs());
        }
        s.finish()
    }

    pub fn merge(&mut self, o: &ErrorStats) {
        self.sum_sq_err += o.sum_sq_err;
        self.sum_sq += o.sum_sq;
        self.max_abs = self.max_abs.max(o.max_abs);
        *self = std::mem::take(self).finish();
    }

    fn finish(mut self) -> ErrorStats {
        self.rel_rms = if self.sum_sq > 0.0 {
            (self.sum_sq_err / self.sum_sq).sqrt()
        } else {
            0.0
        };
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes() {
        for q in [
            QuantType::F32,
            QuantType::F16,
            QuantType::BF16,
            QuantType::Q8 { block: 64 },
            QuantType::Q4 {
                block: 32,
                sym: true,
            },
            QuantType::Q4 {
                block: 128,
                sym: false,
            },
        ] {
            assert_eq!(q.to_string().parse::<QuantType>().unwrap(), q);
        }
        assert_eq!(
            "q4".parse::<QuantType>().unwrap(),
            QuantType::Q4 {
                block: 64,
                sym: false
            }
        );
        assert!("q4a_b48".parse::<QuantType>().is_err());
        // 4.5 bits per weight for asymmetric block 64.
        assert_eq!(
            QuantType::Q4 {
                block: 64,
                sym: false
            }
            .byte_size(2, 128),
            Some(128 + 2 * 2 * 4)
        );
        assert_eq!(
            QuantType::Q4 {
                block: 64,
                sym: false
            }
            .byte_size(2, 100),
            None
        );
        assert_eq!(QuantType::Q8 { block: 64 }.byte_size(3, 64), Some(192 + 6));
        assert_eq!(QuantType::F32.byte_size(usize::MAX, 2), None);
    }
}
