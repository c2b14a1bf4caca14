//! Opens a model for running: the weights, the tokenizer, the chat template and the stop
//! tokens, from an HF checkpoint directory (more formats arrive with later issues).

use crate::chat_template::{ChatTemplate, Message};
use crate::model::Model;
use crate::tokenizer::TextTokenizer;
use crate::Error;
use pocket_formats::hf::tokenizer_config::TOKENIZER;
use pocket_formats::hf::{GenerationConfig, HfCheckpoint, TokenizerConfig};
use pocket_formats::FormatError;
use std::path::{Path, PathBuf};

pub struct LoadedModel {
    pub path: PathBuf,
    pub checkpoint: HfCheckpoint,
    pub model: Model,
    pub tokenizer: TextTokenizer,
    pub tokenizer_config: TokenizerConfig,
    pub template: Option<ChatTemplate>,
    pub generation: GenerationConfig,
    /// Ids that end generation: generation_config's and config's `eos_token_id`, and the
    /// tokenizer's `eos_token`.
    pub stop_ids: Vec<u32>,
}

impl LoadedModel {
    pub fn open(path: &Path) -> Result<LoadedModel, Error> {
        if !path.exists() {
            return Err(FormatError::Invalid {
                path: path.to_path_buf(),
                reason: "no such file or directory".into(),
            }
            .into());
        }
        if !HfCheckpoint::is_checkpoint_dir(path) {
            return Err(FormatError::Invalid {
                path: path.to_path_buf(),
                reason: "not a model pocket can read: expected an HF checkpoint directory with config.json".into(),
            }
            .into());
        }
        let checkpoint = HfCheckpoint::open(path)?;
        let model = Model::from_checkpoint(&checkpoint).map_err(|e| match e {
            Error::Invalid(m) | Error::Unsupported(m) => {
                Error::Invalid(format!("{}: {m}", path.display()))
            }
            other => other,
        })?;
        let tok_path = path.join(TOKENIZER);
        if !tok_path.is_file() {
            return Err(FormatError::Invalid {
                path: tok_path,
                reason: "missing (pocket needs tokenizer.json)".into(),
            }
            .into());
        }
        let tokenizer = TextTokenizer::from_file(&tok_path)?;
        let tokenizer_config = TokenizerConfig::from_dir(path)?;
        let template = match &tokenizer_config.chat_template {
            Some((src, origin)) => Some(ChatTemplate::new(src, origin)?),
            None => None,
        };
        let generation = checkpoint.generation.clone().unwrap_or_default();
        let mut stop_ids = generation.eos_token_ids.clone();
        stop_ids.extend(&checkpoint.spec.eos_token_ids);
        if let Some(id) = tokenizer_config
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
            checkpoint,
            model,
            tokenizer,
            tokenizer_config,
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
        let cfg = &self.tokenizer_config;
        template.render(
            messages,
            add_generation_prompt,
            cfg.bos_token.as_deref().unwrap_or(""),
            cfg.eos_token.as_deref().unwrap_or(""),
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
