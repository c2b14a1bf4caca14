//! The one error type of this crate. Every variant names the file it is about, so the CLI can
//! print a single line that tells the user what to fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    // The cause is part of the message and deliberately not a `#[source]`: the CLI prints the
    // whole chain, which would say it twice.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: invalid JSON: {error}")]
    Json {
        path: PathBuf,
        error: serde_json::Error,
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
        // ENOSPC, EFBIG, EDQUOT: say what to do about it.
        let error = match source.raw_os_error() {
            Some(27 | 28 | 122) => std::io::Error::new(
                source.kind(),
                format!("{source}: out of space (disk full, quota or file-size limit); nothing was written"),
            ),
            _ => source,
        };
        FormatError::Io {
            path: path.into(),
            error,
        }
    }
}
