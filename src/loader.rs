//! Opens a model for running: the weights, the tokenizer, the chat template and the stop
//! tokens, from an HF checkpoint directory, a `.pocket` file or a GGUF file.

use crate::chat_template::{ChatTemplate, Message};
use crate::config::EngineConfig;
use crate::constrain::AnswerFormat;
use crate::model::Model;
use crate::tokenizer::TextTokenizer;
use crate::Error;
use pocket_formats::hf::tokenizer_config::TOKENIZER;
use pocket_formats::hf::GenerationConfig;
use pocket_formats::pocket::TokenizerMeta;
use pocket_formats::FormatError;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub use pocket_formats::model_file::{ModelFile, TensorInfo};

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
    grammars: std::sync::OnceLock<crate::constrain::Grammars>,
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
        if file.is_quantized_hf() {
            return Err(FormatError::Invalid {
                path: path.to_path_buf(),
                reason: format!(
                    "a quantized checkpoint (quantization_config in config.json): convert it first, e.g. `pocket quantize {} -o model.pocket`",
                    path.display()
                ),
            }
            .into());
        }
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
        let model = Model::load(&file, options.config).map_err(|e| match e {
            Error::Invalid(m) | Error::Unsupported(m) => {
                Error::Invalid(format!("{}: {m}", path.display()))
            }
            other => other,
        })?;
        if let ModelFile::Hf { ckpt, .. } = &file {
            let tok_path = ckpt.dir.join(TOKENIZER);
            if !tok_path.is_file() {
                return Err(FormatError::Invalid {
                    path: tok_path,
                    reason: "missing (pocket needs tokenizer.json)".into(),
                }
                .into());
            }
        }
        let tokenizer_origin = match &file {
            ModelFile::Hf { ckpt, .. } => ckpt.dir.join(TOKENIZER),
            ModelFile::Pocket(p) => p.path.join(pocket_formats::pocket::TOKENIZER_BLOB),
            ModelFile::Gguf { file, .. } => file.path.clone(),
        };
        let tokenizer = TextTokenizer::from_bytes(&file.tokenizer_json()?, &tokenizer_origin)?;
        let tokenizer_meta = file.tokenizer_meta()?;
        let template_origin = file.template_origin()?;
        let generation = file.generation();
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
            grammars: std::sync::OnceLock::new(),
        })
    }

    /// The conversation rendered through the model's chat template.
    pub fn render_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        self.render_chat_tools(messages, None, add_generation_prompt)
    }

    /// [`render_chat`](Self::render_chat) with tool definitions for the template.
    pub fn render_chat_tools(
        &self,
        messages: &[Message],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        let template = self.template.as_ref().ok_or_else(|| {
            Error::Invalid(format!(
                "{}: the model has no chat template (use --raw for plain text)",
                self.path.display()
            ))
        })?;
        let t = &self.tokenizer_meta;
        template.render_with_tools(
            messages,
            tools,
            add_generation_prompt,
            t.bos_token.as_deref().unwrap_or(""),
            t.eos_token.as_deref().unwrap_or(""),
        )
    }

    /// The system prompt the chat template adds when a conversation has none (Qwen2.5's "You
    /// are Qwen, created by Alibaba Cloud…", SmolLM2's "You are a helpful AI assistant named
    /// SmolLM…"), read off the template itself: a conversation with one system message `S`
    /// renders as `head S tail`; when the same conversation without it renders as
    /// `head D tail`, the template wrote `D` in its place. `None` when it adds nothing, or has
    /// no template.
    pub fn template_system_prompt(&self) -> Option<String> {
        const S: &str = "\u{E000}pocket-probe\u{E000}";
        const USER: &str = "\u{E001}";
        let with = self
            .render_chat(
                &[Message::new("system", S), Message::new("user", USER)],
                false,
            )
            .ok()?;
        let without = self
            .render_chat(&[Message::new("user", USER)], false)
            .ok()?;
        let (head, rest) = with.split_once(S)?;
        let tail = &rest[..rest.find(USER)?];
        let before = &without[..without.find(USER)?];
        let d = before.strip_prefix(head)?.strip_suffix(tail)?;
        (!d.trim().is_empty()).then(|| d.to_string())
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

    /// [`encode_chat`](Self::encode_chat) with tool definitions for the template.
    pub fn encode_chat_tools(
        &self,
        messages: &[Message],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, Error> {
        let text = self.render_chat_tools(messages, tools, add_generation_prompt)?;
        self.tokenizer.encode(&text, false)
    }

    /// The grammar engine for this model's vocabulary (built on first use: it reads every
    /// token).
    pub fn grammars(
        &self,
    ) -> Result<&crate::constrain::Grammars, crate::constrain::ConstraintError> {
        if let Some(g) = self.grammars.get() {
            return Ok(g);
        }
        let g = crate::constrain::Grammars::new(
            &self.tokenizer,
            self.model.spec.vocab_size,
            &self.stop_ids,
        )?;
        Ok(self.grammars.get_or_init(|| g))
    }

    /// The guide for one answer in `format` ([`AnswerFormat::guide`]) on this model's grammar
    /// engine.
    pub fn guide_for(
        &self,
        format: &AnswerFormat,
    ) -> Result<Option<crate::constrain::Guide>, crate::constrain::ConstraintError> {
        format.guide(self.grammars()?)
    }

    /// The prompt ids of `messages` with `format`'s tools offered: through the template's `tools`
    /// when it takes them, else described in the system prompt.
    pub fn encode_answer_prompt(
        &self,
        format: &AnswerFormat,
        messages: &[Message],
    ) -> Result<Vec<u32>, Error> {
        let tools = format.offered_tools();
        if tools.is_empty() {
            return self.encode_chat(messages, true);
        }
        if self.template.as_ref().is_some_and(|t| t.takes_tools()) {
            let raw: Vec<Value> = tools.iter().map(|t| t.raw.clone()).collect();
            return self.encode_chat_tools(messages, Some(&raw), true);
        }
        let mut all = messages.to_vec();
        let text = crate::constrain::tools::system_text(tools);
        match all.first_mut() {
            Some(first) if first.role == "system" => {
                first.content = format!("{}\n\n{text}", first.content);
            }
            _ => all.insert(0, Message::new("system", &text)),
        }
        self.encode_chat(&all, true)
    }
}
