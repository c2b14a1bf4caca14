//! The one error type of this crate. Every variant names the file it is about, so the CLI can
//! print a single line that tells the user what to fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: missing field `{field}`")]
    MissingField { path: PathBuf, field: String },
    #[error("{path}: field `{field}`: {reason}")]
    InvalidField {
        path: PathBuf,
        field: String,
        reason: String,
    },
    #[error("{path}: unsupported model_type `{model_type}` (supported: llama, qwen2, qwen3)")]
    UnknownArchitecture { path: PathBuf, model_type: String },
    #[error("{path}: not a valid safetensors file: {reason}")]
    Safetensors { path: PathBuf, reason: String },
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor `{name}`: {reason}")]
    BadTensor {
        path: PathBuf,
        name: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

impl FormatError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}
