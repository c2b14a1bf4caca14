//! `tokenizer_config.json` and `chat_template.jinja`: special tokens and the chat template.

use super::json::{read_json, Fields};
use crate::FormatError;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
pub const TOKENIZER: &str = "tokenizer.json";
pub const CHAT_TEMPLATE: &str = "chat_template.jinja";

#[derive(Clone, Debug, Default)]
pub struct TokenizerConfig {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    /// The default chat template and the file it came from.
    pub chat_template: Option<(String, PathBuf)>,
}

impl TokenizerConfig {
    /// Reads what exists of `tokenizer_config.json` and `chat_template.jinja` in `dir`. A
    /// separate `chat_template.jinja` wins, as in transformers 5.
    pub fn from_dir(dir: &Path) -> Result<TokenizerConfig, FormatError> {
        let mut out = TokenizerConfig::default();
        let path = dir.join(TOKENIZER_CONFIG);
        if path.is_file() {
            let value = read_json(&path)?;
            let f = Fields::new(&path, &value)?;
            out.bos_token = token_text(&f, "bos_token")?;
            out.eos_token = token_text(&f, "eos_token")?;
            out.pad_token = token_text(&f, "pad_token")?;
            out.unk_token = token_text(&f, "unk_token")?;
            out.chat_template = default_template(&f)?.map(|t| (t, path.clone()));
        }
        let jinja = dir.join(CHAT_TEMPLATE);
        if jinja.is_file() {
            let text = std::fs::read_to_string(&jinja).map_err(|e| FormatError::io(&jinja, e))?;
            out.chat_template = Some((text, jinja));
        }
        Ok(out)
    }
}

/// Special tokens are written as a string or as an AddedToken object with `content`.
fn token_text(f: &Fields, field: &str) -> Result<Option<String>, FormatError> {
    match f.get(field) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(FormatError::InvalidField {
                path: f.path.to_path_buf(),
                field: field.into(),
                reason: "token object has no string `content`".into(),
            }),
        },
        Some(v) => Err(FormatError::InvalidField {
            path: f.path.to_path_buf(),
            field: field.into(),
            reason: format!("expected a string or a token object, got {v}"),
        }),
    }
}

/// `chat_template` is a string, or a list of `{name, template}` of which "default" is used.
fn default_template(f: &Fields) -> Result<Option<String>, FormatError> {
    let bad = |reason: &str| FormatError::InvalidField {
        path: f.path.to_path_buf(),
        field: "chat_template".into(),
        reason: reason.into(),
    };
    match f.get("chat_template") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                let name = item.get("name").and_then(Value::as_str);
                let template = item.get("template").and_then(Value::as_str);
                match (name, template) {
                    (Some("default"), Some(t)) => return Ok(Some(t.to_string())),
                    (Some(_), Some(_)) => {}
                    _ => return Err(bad("list entries need `name` and `template` strings")),
                }
            }
            Ok(None)
        }
        Some(_) => Err(bad("expected a string or a list of named templates")),
    }
}
