//! Opens a model for running: the weights, the tokenizer, the chat template and the stop
//! tokens, from an HF checkpoint directory, a `.pocket` file or a GGUF file.

use crate::chat_template::{ChatTemplate, Message};
use crate::config::EngineConfig;
use crate::model::Model;
use crate::tokenizer::TextTokenizer;
use crate::weights::WeightSource;
use crate::Error;
use pocket_formats::gguf::GgufFile;
use pocket_formats::hf::tokenizer_config::TOKENIZER;
use pocket_formats::hf::{GenerationConfig, HfCheckpoint, ModelSpec, TokenizerConfig};
use pocket_formats::pocket::reader::PocketFile;
use pocket_formats::pocket::Layout;
use pocket_formats::pocket::{TokenizerMeta, TOKENIZER_BLOB};
use pocket_formats::sniff::Kind;
use pocket_formats::FormatError;
use std::path::{Path, PathBuf};

/// The file a model was loaded from.
pub enum ModelFile {
    Hf(HfCheckpoint),
    Pocket(PocketFile),
    /// A llama.cpp GGUF file, with its architecture read into a spec.
    Gguf(GgufFile, ModelSpec),
}

impl ModelFile {
    /// Opens an HF checkpoint directory, a `.pocket` file or a GGUF file.
    pub fn open(path: &Path) -> Result<ModelFile, Error> {
        Ok(match pocket_formats::sniff::sniff(path)? {
            Kind::Hf => {
                let ckpt = HfCheckpoint::open(path)?;
                if ckpt.raw_config.get("quantization_config").is_some() {
                    return Err(FormatError::Invalid {
                        path: path.to_path_buf(),
                        reason: format!(
                            "a quantized checkpoint (quantization_config in config.json): convert it first, e.g. `pocket quantize {} -o model.pocket`",
                            path.display()
                        ),
                    }
                    .into());
                }
                ModelFile::Hf(ckpt)
            }
            Kind::Pocket => ModelFile::Pocket(PocketFile::open(path)?),
            Kind::Gguf => {
                let f = GgufFile::open(path)?;
                let spec = pocket_formats::gguf::model::spec(&f)?;
                ModelFile::Gguf(f, spec)
            }
        })
    }

    pub fn spec(&self) -> &ModelSpec {
        match self {
            ModelFile::Hf(h) => &h.spec,
            ModelFile::Pocket(p) => &p.header.spec,
            ModelFile::Gguf(_, spec) => spec,
        }
    }

    /// Every stored tensor: name, storage type, shape, bytes, and where it lives.
    pub fn tensor_table(&self) -> Vec<TensorInfo> {
        match self {
            ModelFile::Hf(h) => h
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
            ModelFile::Gguf(g, _) => g
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

    fn weights(&self) -> &dyn WeightSource {
        match self {
            ModelFile::Hf(h) => h,
            ModelFile::Pocket(p) => p,
            ModelFile::Gguf(g, _) => g,
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

pub struct LoadedModel {
    pub path: PathBuf,
    pub file: ModelFile,
    pub model: Model,
    pub tokenizer: TextTokenizer,
    pub tokenizer_meta: TokenizerMeta,
    pub template: Option<ChatTemplate>,
    pub generation: GenerationConfig,
    /// Ids that end generation: generation_config's and config's `eos_token_id`, and the
    /// tokenizer's `eos_token`.
    pub stop_ids: Vec<u32>,
}

/// What [`LoadedModel::open_with`] checks while loading.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Check every tensor of a `.pocket` against its stored xxh3 checksum before running it,
    /// and refuse a mismatch naming the tensors: a flipped byte otherwise runs silently, with
    /// garbage output. It reads the whole file once (the first prompt reads it anyway).
    pub verify: bool,
    /// The kernels, activation precision and KV cache type the model runs with.
    pub config: EngineConfig,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            verify: true,
            config: EngineConfig::fast(),
        }
    }
}

impl LoadedModel {
    /// Opens a model, checksums verified ([`LoadOptions::default`]).
    pub fn open(path: &Path) -> Result<LoadedModel, Error> {
        LoadedModel::open_with(path, LoadOptions::default())
    }

    pub fn open_with(path: &Path, options: LoadOptions) -> Result<LoadedModel, Error> {
        let file = ModelFile::open(path)?;
        if let (ModelFile::Pocket(p), true) = (&file, options.verify) {
            let damaged = p.verify();
            if !damaged.is_empty() {
                return Err(Error::Invalid(format!(
                    "{}: damaged: the checksum of {} does not match (the file changed after it \
                     was written; export it again, or pass --no-verify to run it anyway)",
                    path.display(),
                    damaged.join(", ")
                )));
            }
        }
        let model =
            Model::load(file.spec(), file.weights(), options.config).map_err(|e| match e {
                Error::Invalid(m) | Error::Unsupported(m) => {
                    Error::Invalid(format!("{}: {m}", path.display()))
                }
                other => other,
            })?;
        let (tokenizer, tokenizer_meta, template_origin, generation) = match &file {
            ModelFile::Hf(h) => {
                let tok_path = path.join(TOKENIZER);
                if !tok_path.is_file() {
                    return Err(FormatError::Invalid {
                        path: tok_path,
                        reason: "missing (pocket needs tokenizer.json)".into(),
                    }
                    .into());
                }
                let c = TokenizerConfig::from_dir(path)?;
                let origin = c.chat_template.as_ref().map(|(_, p)| p.clone());
                let meta = TokenizerMeta {
                    bos_token: c.bos_token,
                    eos_token: c.eos_token,
                    pad_token: c.pad_token,
                    unk_token: c.unk_token,
                    chat_template: c.chat_template.map(|(t, _)| t),
                };
                (
                    TextTokenizer::from_file(&tok_path)?,
                    meta,
                    origin,
                    h.generation.clone().unwrap_or_default(),
                )
            }
            ModelFile::Gguf(g, _) => {
                let json = pocket_formats::gguf::tokenizer::tokenizer_json(g)?;
                let tok = TextTokenizer::from_bytes(json.as_bytes(), path)?;
                let text = |k: &str| pocket_formats::gguf::tokenizer::token_text(g, k);
                let meta = TokenizerMeta {
                    bos_token: text("tokenizer.ggml.bos_token_id"),
                    eos_token: text("tokenizer.ggml.eos_token_id"),
                    pad_token: text("tokenizer.ggml.padding_token_id"),
                    unk_token: text("tokenizer.ggml.unknown_token_id"),
                    chat_template: g
                        .get("tokenizer.chat_template")
                        .and_then(|v| v.as_str())
                        .map(str::to_string),
                };
                (
                    tok,
                    meta,
                    Some(path.to_path_buf()),
                    GenerationConfig::default(),
                )
            }
            ModelFile::Pocket(p) => {
                let bytes = p.blob(TOKENIZER_BLOB)?;
                let tok = TextTokenizer::from_bytes(&bytes, &path.join(TOKENIZER_BLOB))?;
                (
                    tok,
                    p.header.tokenizer.clone(),
                    Some(path.to_path_buf()),
                    p.header.generation.clone(),
                )
            }
        };
        let template = match (&tokenizer_meta.chat_template, template_origin) {
            (Some(src), Some(origin)) => Some(ChatTemplate::new(src, &origin)?),
            _ => None,
        };
        let mut stop_ids = generation.eos_token_ids.clone();
        stop_ids.extend(&file.spec().eos_token_ids);
        if let Some(id) = tokenizer_meta
            .eos_token
            .as_deref()
            .and_then(|t| tokenizer.token_to_id(t))
        {
            stop_ids.push(id);
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        Ok(LoadedModel {
            path: path.to_path_buf(),
            file,
            model,
            tokenizer,
            tokenizer_meta,
            template,
            generation,
            stop_ids,
        })
    }

    /// The conversation rendered through the model's chat template.
    pub fn render_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        let template = self.template.as_ref().ok_or_else(|| {
            Error::Invalid(format!(
                "{}: the model has no chat template (use --raw for plain text)",
                self.path.display()
            ))
        })?;
        let t = &self.tokenizer_meta;
        template.render(
            messages,
            add_generation_prompt,
            t.bos_token.as_deref().unwrap_or(""),
            t.eos_token.as_deref().unwrap_or(""),
        )
    }

    /// Token ids of a rendered conversation (special tokens come from the template itself, so
    /// none are added, as in transformers' `apply_chat_template`).
    pub fn encode_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, Error> {
        let text = self.render_chat(messages, add_generation_prompt)?;
        self.tokenizer.encode(&text, false)
    }
}
