//! Where a conversion reads from: an HF checkpoint directory or a `.pocket` file at full
//! precision. Both give tensors by name as f32, plus the tokenizer, template and defaults.

use crate::gguf::{import as gguf_import, GgufFile};
use crate::hf::compressed_tensors::{self, CtLinear};
use crate::hf::tokenizer_config::TOKENIZER;
use crate::hf::{DType, GenerationConfig, HfCheckpoint, ModelSpec, TokenizerConfig};
use crate::pocket::reader::PocketFile;
use crate::pocket::{TokenizerMeta, TOKENIZER_BLOB};
use crate::quant::{dense, QuantType};
use crate::sniff::Kind;
use crate::FormatError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub enum Source {
    /// An HF checkpoint; `ct` lists its compressed-tensors int4 layers, if any.
    Hf {
        ckpt: HfCheckpoint,
        ct: BTreeMap<String, CtLinear>,
    },
    Pocket(PocketFile),
    /// A GGUF file (llama.cpp), with its architecture read into a spec.
    Gguf {
        file: GgufFile,
        spec: ModelSpec,
    },
}

/// A tensor as stored in the source.
pub struct SourceTensor {
    pub name: String,
    pub shape: Vec<usize>,
    /// The source's storage type (`None` for a dtype pocket cannot read).
    pub stored: Option<QuantType>,
}

impl Source {
    pub fn open(path: &Path) -> Result<Source, FormatError> {
        Ok(match crate::sniff::sniff(path)? {
            Kind::Hf => {
                let ckpt = HfCheckpoint::open(path)?;
                let ct = compressed_tensors::detect(&ckpt)?.unwrap_or_default();
                Source::Hf { ckpt, ct }
            }
            Kind::Pocket => Source::Pocket(PocketFile::open(path)?),
            Kind::Gguf => {
                let file = GgufFile::open(path)?;
                let spec = crate::gguf::model::spec(&file)?;
                Source::Gguf { file, spec }
            }
        })
    }

    pub fn path(&self) -> &Path {
        match self {
            Source::Hf { ckpt: h, .. } => &h.dir,
            Source::Pocket(p) => &p.path,
            Source::Gguf { file, .. } => &file.path,
        }
    }

    pub fn spec(&self) -> &ModelSpec {
        match self {
            Source::Hf { ckpt: h, .. } => &h.spec,
            Source::Pocket(p) => &p.header.spec,
            Source::Gguf { spec, .. } => spec,
        }
    }

    pub fn generation(&self) -> GenerationConfig {
        match self {
            Source::Hf { ckpt: h, .. } => h.generation.clone().unwrap_or_default(),
            Source::Pocket(p) => p.header.generation.clone(),
            Source::Gguf { spec, .. } => GenerationConfig {
                bos_token_id: spec.bos_token_id,
                eos_token_ids: spec.eos_token_ids.clone(),
                ..Default::default()
            },
        }
    }

    pub fn tensors(&self) -> Vec<SourceTensor> {
        let mut v: Vec<SourceTensor> = match self {
            Source::Hf { ckpt: h, ct } => h
                .tensors()
                .filter(|t| !is_ct_part(ct, &t.name))
                .map(|t| SourceTensor {
                    name: t.name.clone(),
                    shape: t.shape.clone(),
                    stored: match t.dtype {
                        DType::F32 => Some(QuantType::F32),
                        DType::F16 => Some(QuantType::F16),
                        DType::BF16 => Some(QuantType::BF16),
                        DType::Other(_) => None,
                    },
                })
                .chain(ct.values().map(|l| SourceTensor {
                    name: l.weight_name(),
                    shape: vec![l.rows, l.cols],
                    stored: Some(l.storage()),
                }))
                .collect(),
            Source::Pocket(p) => p
                .tensors()
                .map(|t| SourceTensor {
                    name: t.name.clone(),
                    shape: t.shape.clone(),
                    stored: Some(t.dtype),
                })
                .collect(),
            // Types we cannot carry over (Q8_0, K-quants…) are read as f32 and re-encoded.
            Source::Gguf { file, .. } => gguf_import::tensors(file)
                .into_iter()
                .map(|(name, t)| SourceTensor {
                    name,
                    shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                    stored: Some(gguf_import::carried_type(t.ty).unwrap_or(QuantType::F32)),
                })
                .collect(),
        };
        v.sort_by_key(|t| natural_key(&t.name));
        v
    }

    /// The tensor's values as f32; only for full-precision storage.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>, FormatError> {
        match self {
            Source::Hf { ckpt: h, ct } => {
                if let Some(l) = ct.get(name) {
                    return compressed_tensors::dequantize(h, l);
                }
                let t = h.tensor(name)?;
                t.to_f32_vec().ok_or_else(|| FormatError::BadTensor {
                    path: h.file_of(name).unwrap_or(&h.dir).to_path_buf(),
                    name: name.into(),
                    reason: format!(
                        "dtype {} cannot be converted (F32, F16, BF16 only)",
                        t.dtype.name()
                    ),
                })
            }
            Source::Pocket(p) => {
                let t = p.tensor(name).ok_or_else(|| FormatError::MissingTensor {
                    path: p.path.clone(),
                    name: name.into(),
                })?;
                let n = t.entry.shape.iter().product();
                let mut out = vec![0.0; n];
                let b = t.data.as_slice();
                match t.entry.dtype {
                    QuantType::F32 => dense::decode_f32(b, &mut out),
                    QuantType::F16 => dense::decode_f16(b, &mut out),
                    QuantType::BF16 => dense::decode_bf16(b, &mut out),
                    q => {
                        return Err(FormatError::BadTensor {
                            path: p.path.clone(),
                            name: name.into(),
                            reason: format!(
                            "already quantized as {q}: quantize from the F16/BF16 build instead"
                        ),
                        })
                    }
                }
                Ok(out)
            }
            Source::Gguf { file, spec } => {
                let t =
                    gguf_import::tensor(file, name).ok_or_else(|| FormatError::MissingTensor {
                        path: file.path.clone(),
                        name: name.into(),
                    })?;
                Ok(gguf_import::read_f32(file, spec, name, t))
            }
        }
    }

    /// The stored bytes, for copying a tensor that keeps its type (for compressed-tensors
    /// layers: our Q4 encoding of the same integers, if its parameters are exact in f16).
    pub fn raw_bytes(&self, name: &str) -> Option<Vec<u8>> {
        match self {
            Source::Hf { ckpt: h, ct } => match ct.get(name) {
                Some(l) => compressed_tensors::to_q4(h, l).ok()?.ok(),
                None => h.get(name).map(|t| t.bytes().to_vec()),
            },
            Source::Pocket(p) => p.tensor(name).map(|t| t.row_major().into_owned()),
            Source::Gguf { file, spec } => {
                let t = gguf_import::tensor(file, name)?;
                match gguf_import::q4_bytes(file, spec, name, t) {
                    Some(r) => r.ok(),
                    // Dense types: the values re-encode losslessly from f32 (rows reordered).
                    None => None,
                }
            }
        }
    }

    /// `tokenizer.json` bytes.
    pub fn tokenizer_json(&self) -> Result<Vec<u8>, FormatError> {
        match self {
            Source::Hf { ckpt: h, .. } => {
                let path = h.dir.join(TOKENIZER);
                std::fs::read(&path).map_err(|e| FormatError::io(&path, e))
            }
            Source::Pocket(p) => p.blob(TOKENIZER_BLOB),
            Source::Gguf { file, .. } => {
                Ok(crate::gguf::tokenizer::tokenizer_json(file)?.into_bytes())
            }
        }
    }

    pub fn tokenizer_meta(&self) -> Result<TokenizerMeta, FormatError> {
        match self {
            Source::Hf { ckpt: h, .. } => {
                let c = TokenizerConfig::from_dir(&h.dir)?;
                Ok(TokenizerMeta {
                    bos_token: c.bos_token,
                    eos_token: c.eos_token,
                    pad_token: c.pad_token,
                    unk_token: c.unk_token,
                    chat_template: c.chat_template.map(|(t, _)| t),
                })
            }
            Source::Pocket(p) => Ok(p.header.tokenizer.clone()),
            Source::Gguf { file, .. } => {
                let text = |k: &str| crate::gguf::tokenizer::token_text(file, k);
                Ok(TokenizerMeta {
                    bos_token: text("tokenizer.ggml.bos_token_id"),
                    eos_token: text("tokenizer.ggml.eos_token_id"),
                    pad_token: text("tokenizer.ggml.padding_token_id"),
                    unk_token: text("tokenizer.ggml.unknown_token_id"),
                    chat_template: file
                        .get("tokenizer.chat_template")
                        .and_then(|v| v.as_str())
                        .map(str::to_string),
                })
            }
        }
    }

    /// Files whose hashes go into the output's provenance.
    pub fn provenance_files(&self) -> Vec<PathBuf> {
        match self {
            Source::Hf { ckpt: h, .. } => {
                let mut v: Vec<PathBuf> = [
                    "config.json",
                    "generation_config.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                    "chat_template.jinja",
                ]
                .iter()
                .map(|f| h.dir.join(f))
                .filter(|p| p.is_file())
                .collect();
                v.extend(h.weight_files.iter().cloned());
                v
            }
            Source::Pocket(p) => vec![p.path.clone()],
            Source::Gguf { file, .. } => vec![file.path.clone()],
        }
    }
}

/// A compressed-tensors part (`weight_packed`, …) of a layer that is imported as a whole.
fn is_ct_part(ct: &BTreeMap<String, CtLinear>, name: &str) -> bool {
    [
        "weight_packed",
        "weight_scale",
        "weight_zero_point",
        "weight_shape",
    ]
    .iter()
    .any(|suffix| {
        name.strip_suffix(suffix)
            .and_then(|m| m.strip_suffix('.'))
            .is_some_and(|m| ct.contains_key(&format!("{m}.weight")))
    })
}

/// Sort key that orders `layers.2` before `layers.10`.
pub fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                out.push((
                    std::mem::take(&mut text),
                    digits.parse().unwrap_or(u64::MAX),
                ));
                digits.clear();
            }
            text.push(c);
        }
    }
    out.push((text, digits.parse().unwrap_or(0)));
    out
}
