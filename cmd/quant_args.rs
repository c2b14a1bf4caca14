//! Options that choose storage types, shared by `export` and `quantize`.

use anyhow::{bail, Result};
use clap::Args;
use pocket_formats::quant::search::Method;
use pocket_formats::quant::QuantType;
use pocket_formats::recipe::{QatMode, Recipe};

#[derive(Args, Clone)]
pub struct QuantArgs {
    /// Storage for linear layers (and, unless --embed says otherwise, the embedding/head):
    /// q4, iq4_nl, iq4_xs, q5_0, q5_1, q8, f16, bf16, f32. The default q4 (asymmetric, block 64)
    /// stores the embedding as symmetric block-32 Q4: the same 4.5 bits per weight, measured
    /// more accurate there. iq4_nl and iq4_xs are ggml's non-uniform 4-bit grid (4.5 and 4.25
    /// bits per weight; iq4_xs where rows are a multiple of 256, else iq4_nl); q5_0/q5_1
    /// are ggml's 5-bit types (5.5 and 6 bits per weight); all written with the calibrated
    /// search
    ///
    /// A GGUF source keeps its quantized blocks bit for bit unless --quant is given (then
    /// every weight is re-quantized from its dequantized values, and the report says what
    /// that cost)
    #[arg(long, value_name = "TYPE (default q4)")]
    pub quant: Option<String>,
    /// Every weight matrix pocket quantizes (Q4, Q5, IQ4_NL, IQ4_XS and Q8; the GGUF export's
    /// 4- and 5-bit types) takes GPTQ's error compensation: each column's rounding is absorbed
    /// by the columns after it, over the calibration activations (needs --calib; a long text,
    /// e.g. --calib-tokens 32768, helps most; the tied embedding keeps the search alone).
    /// Costs export time and memory: one cols² matrix per layer input
    #[arg(long)]
    pub gptq: bool,
    /// Q4 block length along a row: 32, 64 or 128
    #[arg(long, default_value_t = 64, hide_short_help = true)]
    pub block: usize,
    /// Symmetric Q4 (one scale per block) instead of asymmetric (scale and zero point)
    #[arg(long, hide_short_help = true)]
    pub sym: bool,
    /// Calibration text for the Q4 scale search: the model is run over it first and each
    /// weight's error is weighted by its input's activations. `builtin` (default) uses a short
    /// mixed text shipped with pocket; `none` searches on the weights alone
    #[arg(long, value_name = "FILE|builtin|none", default_value = "builtin")]
    pub calib: String,
    /// Tokens of calibration text to run (in chunks of 256)
    #[arg(long, default_value_t = 512, hide_short_help = true)]
    pub calib_tokens: usize,
    /// Export weights holding NaN or infinity (refused by default, every such tensor named)
    #[arg(long, hide_short_help = true)]
    pub allow_nonfinite: bool,
    /// Fit the .pocket into this size (e.g. 173MB, 180MiB, 0.2GB): every weight matrix gets
    /// the storage type (Q4 blocks 32/64/128, symmetric or not, iq4_xs, iq4_nl, q5_0, q5_1 or Q8) that loses
    /// least for its bytes, by each tensor's measured effect on the model's output over the
    /// calibration text. Costs one forward pass per weight matrix (minutes on a 0.5B model)
    #[arg(long, value_name = "SIZE", conflicts_with = "bpw")]
    pub size: Option<String>,
    /// Like --size, in bits per parameter of the whole file (e.g. 4.8; the default Q4 is about
    /// 4.5)
    #[arg(long, value_name = "BITS")]
    pub bpw: Option<f64>,
    /// With --size/--bpw: keep each tensor's measured effect in FILE (JSON), and reuse it when
    /// FILE exists, so trying other sizes of the same source and calibration takes seconds
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    pub sensitivity: Option<std::path::PathBuf>,
}

/// What `--size` / `--bpw` asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeTarget {
    Bytes(u64),
    BitsPerParameter(f64),
}

/// `173MB`, `173 MB`, `180MiB`, `0.2GB`, `5000000` (bytes): decimal units are powers of 1000,
/// binary ones (KiB, MiB, GiB) of 1024.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("--size {s}: not a size (e.g. 173MB, 180MiB, 0.2GB)"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => bail!("--size {s}: unknown unit `{other}` (B, KB, MB, GB, KiB, MiB, GiB)"),
    };
    let bytes = n * scale;
    if !(1.0..1e15).contains(&bytes) {
        bail!("--size {s}: out of range");
    }
    Ok(bytes as u64)
}

#[derive(Args, Clone)]
pub struct RecipeArgs {
    /// Storage for the embedding and (tied) output head, e.g. q8, f16 or q4a_b64 (default: as
    /// --quant; q4s_b32 with the default q4)
    #[arg(long, hide_short_help = true)]
    pub embed: Option<String>,
    /// Per-tensor override PATTERN=TYPE (repeatable; first match wins; `*` and `?` wildcards),
    /// e.g. --type '*.layers.0.*=q8' --type '*down_proj*=q4s_b32'
    #[arg(long = "type", value_name = "PATTERN=TYPE", hide_short_help = true)]
    pub overrides: Vec<String>,
    /// Q4 parameter choice: search (least-squares scale search, default) or rtn (min/max)
    #[arg(long, default_value = "search", value_parser = ["search", "rtn"], hide_short_help = true)]
    pub method: String,
    /// Weights already on a 4-bit grid (QAT): auto stores those blocks exactly, strict fails
    /// if any Q4 block is off the grid, off ignores grids
    #[arg(long, default_value = "auto", value_parser = ["auto", "strict", "off"], hide_short_help = true)]
    pub qat: String,
}

impl QuantArgs {
    pub fn calib_args(&self) -> crate::convert::CalibArgs<'_> {
        crate::convert::CalibArgs {
            calib: &self.calib,
            tokens: self.calib_tokens,
        }
    }

    pub fn storage(&self) -> Result<QuantType> {
        let t = match self.quant_name() {
            "q4" => {
                if ![32, 64, 128].contains(&self.block) {
                    bail!("--block must be 32, 64 or 128");
                }
                QuantType::Q4 {
                    block: self.block,
                    sym: self.sym,
                }
            }
            other => other.parse().map_err(anyhow::Error::msg)?,
        };
        Ok(t)
    }

    /// `--quant`, or its default `q4`.
    pub fn quant_name(&self) -> &str {
        self.quant.as_deref().unwrap_or("q4")
    }

    /// `--size` or `--bpw`, checked against the flags it replaces.
    pub fn size_target(&self) -> Result<Option<SizeTarget>> {
        if self.sensitivity.is_some() && self.size.is_none() && self.bpw.is_none() {
            bail!("--sensitivity keeps what --size/--bpw measure: give one of them");
        }
        let t = match (&self.size, self.bpw) {
            (Some(s), _) => SizeTarget::Bytes(parse_size(s)?),
            (None, Some(b)) if b.is_finite() && (1.0..=32.0).contains(&b) => {
                SizeTarget::BitsPerParameter(b)
            }
            (None, Some(b)) => bail!("--bpw {b}: give bits per parameter between 1 and 32"),
            (None, None) => return Ok(None),
        };
        let flag = if self.size.is_some() {
            "--size"
        } else {
            "--bpw"
        };
        if self.quant.is_some() || self.block != 64 || self.sym {
            bail!(
                "{flag} chooses every weight matrix's type itself: drop --quant/--block/--sym (pin \
                 a tensor's type with `pocket quantize --type PATTERN=TYPE`)"
            );
        }
        if self.calib == "none" {
            bail!(
                "{flag} measures each tensor's effect on the model over the calibration text: \
                 give --calib builtin or a text file, not none"
            );
        }
        Ok(Some(t))
    }

    pub fn recipe(&self, extra: Option<&RecipeArgs>) -> Result<Recipe> {
        let linear = self.storage()?;
        let mut r = Recipe {
            linear,
            // A GGUF keeps its blocks unless a type or a size is asked for; --block and --sym
            // ask for Q4 of that shape (a flag is never silently ignored).
            keep_source_blocks: self.quant.is_none()
                && self.size.is_none()
                && self.bpw.is_none()
                && self.block == 64
                && !self.sym,
            embed: pocket_formats::recipe::default_embed(linear),
            allow_nonfinite: self.allow_nonfinite,
            gptq: self.gptq,
            ..Recipe::default()
        };
        if let Some(x) = extra {
            if let Some(e) = &x.embed {
                r.embed = e.parse().map_err(anyhow::Error::msg)?;
            }
            for o in &x.overrides {
                let Some((pat, ty)) = o.split_once('=') else {
                    bail!("--type wants PATTERN=TYPE, got `{o}`")
                };
                r.overrides
                    .push((pat.to_string(), ty.parse().map_err(anyhow::Error::msg)?));
            }
            r.method = if x.method == "rtn" {
                Method::Rtn
            } else {
                Method::Search
            };
            r.qat = match x.qat.as_str() {
                "strict" => QatMode::Strict,
                "off" => QatMode::Off,
                _ => QatMode::Auto,
            };
        }
        Ok(r)
    }
}
