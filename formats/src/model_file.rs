//! A model file of any format, opened and sniffed once: an HF checkpoint directory, a
//! `.pocket` file or a GGUF file. Everything else reads models through it: the engine's
//! loader (the spec, the tokenizer, the generation config and [`ModelFile::stored`] tensors,
//! from which it builds its matrices), conversion (tensors as f32 or carried-over bytes),
//! `inspect` (the tensor table) and provenance. Tensors are named by their Hugging Face
//! names whatever the format: GGUF names, llama.cpp's q/k row order and Gemma's norm shift
//! are applied here, once.

use crate::gguf::{import as gguf_import, GgmlType, GgufFile};
use crate::hf::compressed_tensors::{self, CtLinear};
use crate::hf::tokenizer_config::TOKENIZER;
use crate::hf::{DType, GenerationConfig, HfCheckpoint, ModelSpec, TokenizerConfig};
use crate::pocket::reader::PocketFile;
use crate::pocket::{Layout, TokenizerMeta, TOKENIZER_BLOB};
use crate::quant::{dense, QuantType};
use crate::sniff::Kind;
use crate::stored::{Encoding, StoredTensor};
use crate::FormatError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub enum ModelFile {
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

/// A tensor as stored in the file, for conversion.
pub struct SourceTensor {
    pub name: String,
    pub shape: Vec<usize>,
    /// The source's storage type (`None` for a dtype pocket cannot read).
    pub stored: Option<QuantType>,
}

impl ModelFile {
    pub fn open(path: &Path) -> Result<ModelFile, FormatError> {
        Ok(match crate::sniff::sniff(path)? {
            Kind::Hf => {
                let ckpt = HfCheckpoint::open(path)?;
                let ct = compressed_tensors::detect(&ckpt)?.unwrap_or_default();
                ModelFile::Hf { ckpt, ct }
            }
            Kind::Pocket => ModelFile::Pocket(PocketFile::open(path)?),
            Kind::Gguf => {
                let file = GgufFile::open(path)?;
                let spec = crate::gguf::model::spec(&file)?;
                ModelFile::Gguf { file, spec }
            }
        })
    }

    pub fn path(&self) -> &Path {
        match self {
            ModelFile::Hf { ckpt: h, .. } => &h.dir,
            ModelFile::Pocket(p) => &p.path,
            ModelFile::Gguf { file, .. } => &file.path,
        }
    }

    pub fn spec(&self) -> &ModelSpec {
        match self {
            ModelFile::Hf { ckpt: h, .. } => &h.spec,
            ModelFile::Pocket(p) => &p.header.spec,
            ModelFile::Gguf { spec, .. } => spec,
        }
    }

    pub fn generation(&self) -> GenerationConfig {
        match self {
            ModelFile::Hf { ckpt: h, .. } => h.generation.clone().unwrap_or_default(),
            ModelFile::Pocket(p) => p.header.generation.clone(),
            ModelFile::Gguf { spec, .. } => GenerationConfig {
                bos_token_id: spec.bos_token_id,
                eos_token_ids: spec.eos_token_ids.clone(),
                ..Default::default()
            },
        }
    }

    pub fn tensors(&self) -> Vec<SourceTensor> {
        let mut v: Vec<SourceTensor> = match self {
            ModelFile::Hf { ckpt: h, ct } => h
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
            ModelFile::Pocket(p) => p
                .tensors()
                .map(|t| SourceTensor {
                    name: t.name.clone(),
                    shape: t.shape.clone(),
                    stored: Some(t.dtype),
                })
                .collect(),
            // Quantized types are carried as they are (`QuantType::Ggml`) or re-encoded from
            // their f32 values, as the recipe says.
            ModelFile::Gguf { file, .. } => gguf_import::tensors(file)
                .into_iter()
                .map(|(name, t)| SourceTensor {
                    name,
                    shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                    stored: Some(match t.ty {
                        GgmlType::F32 => QuantType::F32,
                        GgmlType::F16 => QuantType::F16,
                        GgmlType::BF16 => QuantType::BF16,
                        ty => QuantType::Ggml(ty),
                    }),
                })
                .collect(),
        };
        v.sort_by_key(|t| natural_key(&t.name));
        v
    }

    /// The tensor's values as f32; only for full-precision storage.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>, FormatError> {
        match self {
            ModelFile::Hf { ckpt: h, ct } => {
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
            ModelFile::Pocket(p) => {
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
                    // A GGUF's blocks kept in the file decode as the GGUF's do.
                    QuantType::Ggml(_) => return self.stored(name)?.to_f32(),
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
            ModelFile::Gguf { file, spec } => {
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
            ModelFile::Hf { ckpt: h, ct } => match ct.get(name) {
                Some(l) => compressed_tensors::to_q4(h, l).ok()?.ok(),
                None => h.get(name).map(|t| t.bytes().to_vec()),
            },
            ModelFile::Pocket(p) => p.tensor(name).map(|t| t.row_major().into_owned()),
            ModelFile::Gguf { file, spec } => {
                let t = gguf_import::tensor(file, name)?;
                // Dense types: the values re-encode losslessly from f32 (rows reordered).
                if matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
                    return None;
                }
                Some(gguf_import::blocks_in_row_order(file, spec, name, t))
            }
        }
    }

    /// Whether the source is a GGUF file.
    pub fn is_gguf(&self) -> bool {
        matches!(self, ModelFile::Gguf { .. })
    }

    /// An HF checkpoint whose config declares a `quantization_config` (compressed-tensors,
    /// AWQ, GPTQ…): conversion reads it, the engine does not run it directly.
    pub fn is_quantized_hf(&self) -> bool {
        matches!(self, ModelFile::Hf { ckpt, .. } if ckpt.raw_config.get("quantization_config").is_some())
    }

    /// A tensor by its HF name, as stored: encoding, layout, bytes, row map and shift.
    pub fn stored(&self, name: &str) -> Result<StoredTensor, FormatError> {
        let missing = || FormatError::MissingTensor {
            path: self.path().to_path_buf(),
            name: name.into(),
        };
        Ok(match self {
            ModelFile::Hf { ckpt: h, .. } => {
                let t = h.tensor(name)?;
                let file = h.file_of(name).unwrap_or(&h.dir).to_path_buf();
                let q = match t.dtype {
                    DType::F32 => QuantType::F32,
                    DType::F16 => QuantType::F16,
                    DType::BF16 => QuantType::BF16,
                    DType::Other(ref d) => {
                        return Err(FormatError::BadTensor {
                            path: file,
                            name: name.into(),
                            reason: format!("dtype {d}; weights must be F32, F16 or BF16"),
                        })
                    }
                };
                StoredTensor {
                    name: name.into(),
                    shape: t.shape.clone(),
                    encoding: Encoding::Pocket(q),
                    layout: Layout::Rows,
                    bytes: t.view().clone(),
                    row_map: None,
                    shift: 0.0,
                    file,
                }
            }
            ModelFile::Pocket(p) => {
                let t = p.tensor(name).ok_or_else(missing)?;
                StoredTensor {
                    name: name.into(),
                    shape: t.entry.shape.clone(),
                    // A GGUF's blocks carried into the file read as the GGUF's do.
                    encoding: match t.entry.dtype {
                        QuantType::Ggml(ty) => Encoding::Ggml(ty),
                        q => Encoding::Pocket(q),
                    },
                    layout: t.entry.layout,
                    bytes: t.data,
                    row_map: None,
                    shift: 0.0,
                    file: p.path.clone(),
                }
            }
            ModelFile::Gguf { file, spec } => {
                let t =
                    gguf_import::tensor(file, name).ok_or_else(|| FormatError::MissingTensor {
                        path: file.path.clone(),
                        name: crate::gguf::model::family(file)
                            .and_then(|fam| crate::gguf::model::gguf_name(name, fam))
                            .unwrap_or_else(|| name.into()),
                    })?;
                let shape: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
                // A vector's map (a llama q/k bias) reorders its elements.
                let rows = shape.first().copied().unwrap_or(0);
                StoredTensor {
                    name: name.into(),
                    shape,
                    encoding: Encoding::Ggml(t.ty),
                    layout: Layout::Rows,
                    bytes: t.data.clone(),
                    row_map: gguf_import::row_map(file, spec, name, rows)
                        .map(|m| m.into_iter().map(|r| r as u32).collect()),
                    shift: crate::gguf::model::norm_shift(spec.family, name),
                    file: file.path.clone(),
                }
            }
        })
    }

    /// Every stored tensor under its file's own name: storage type, shape, bytes, and where
    /// it lives (`inspect`).
    pub fn tensor_table(&self) -> Vec<TensorInfo> {
        match self {
            ModelFile::Hf { ckpt: h, .. } => h
                .tensors()
                .map(|t| TensorInfo {
                    name: t.name.clone(),
                    dtype: t.dtype.name().to_lowercase(),
                    shape: t.shape.clone(),
                    bytes: t.bytes().len() as u64,
                    location: h
                        .file_of(&t.name)
                        .and_then(|p| p.file_name())
                        .map(|f| f.to_string_lossy().to_string())
                        .unwrap_or_default(),
                })
                .collect(),
            ModelFile::Pocket(p) => p
                .tensors()
                .map(|t| TensorInfo {
                    name: t.name.clone(),
                    dtype: t.dtype.to_string(),
                    shape: t.shape.clone(),
                    bytes: t.size,
                    location: match t.layout {
                        Layout::Rows => format!("@{}", t.offset),
                        Layout::Rows16 => format!("@{} rows16", t.offset),
                    },
                })
                .collect(),
            ModelFile::Gguf { file, .. } => file
                .tensors
                .iter()
                .map(|t| TensorInfo {
                    name: t.name.clone(),
                    dtype: t.ty.name().to_lowercase(),
                    shape: t.dims.iter().rev().map(|&d| d as usize).collect(),
                    bytes: t.data.len() as u64,
                    location: String::new(),
                })
                .collect(),
        }
    }

    /// Stored parameters (a tied head is stored once, so counted once).
    pub fn parameter_count(&self) -> u64 {
        self.tensor_table()
            .iter()
            .map(|t| t.shape.iter().product::<usize>() as u64)
            .sum()
    }

    /// Where the chat template came from, for its error messages: `tokenizer_config.json` or
    /// `chat_template.jinja` of a checkpoint, else the file itself.
    pub fn template_origin(&self) -> Result<Option<PathBuf>, FormatError> {
        Ok(match self {
            ModelFile::Hf { ckpt: h, .. } => TokenizerConfig::from_dir(&h.dir)?
                .chat_template
                .map(|(_, origin)| origin),
            ModelFile::Pocket(p) => Some(p.path.clone()),
            ModelFile::Gguf { file, .. } => Some(file.path.clone()),
        })
    }

    /// `tokenizer.json` bytes.
    pub fn tokenizer_json(&self) -> Result<Vec<u8>, FormatError> {
        match self {
            ModelFile::Hf { ckpt: h, .. } => {
                let path = h.dir.join(TOKENIZER);
                std::fs::read(&path).map_err(|e| FormatError::io(&path, e))
            }
            ModelFile::Pocket(p) => p.blob(TOKENIZER_BLOB),
            ModelFile::Gguf { file, .. } => {
                Ok(crate::gguf::tokenizer::tokenizer_json(file)?.into_bytes())
            }
        }
    }

    pub fn tokenizer_meta(&self) -> Result<TokenizerMeta, FormatError> {
        match self {
            ModelFile::Hf { ckpt: h, .. } => {
                let c = TokenizerConfig::from_dir(&h.dir)?;
                Ok(TokenizerMeta {
                    bos_token: c.bos_token,
                    eos_token: c.eos_token,
                    pad_token: c.pad_token,
                    unk_token: c.unk_token,
                    chat_template: c.chat_template.map(|(t, _)| t),
                })
            }
            ModelFile::Pocket(p) => Ok(p.header.tokenizer.clone()),
            ModelFile::Gguf { file, .. } => {
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
            ModelFile::Hf { ckpt: h, .. } => {
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
            ModelFile::Pocket(p) => vec![p.path.clone()],
            ModelFile::Gguf { file, .. } => vec![file.path.clone()],
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: u64,
    /// The shard file (HF) or the data-section offset (`.pocket`, with `rows16` for matrices
    /// stored in the kernels' interleaved layout).
    pub location: String,
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
