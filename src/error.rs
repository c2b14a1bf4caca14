//! The engine's error type. File problems come from `pocket-formats` and keep their path.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Format(#[from] pocket_formats::FormatError),
    #[error("{path}: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("chat template ({path}): {reason}")]
    Template { path: PathBuf, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
}
