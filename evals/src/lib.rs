//! Evaluation tasks and scoring for pocket. Tasks talk to a model only through the small
//! traits here, so scoring is testable without a model and the engine stays out of this crate.
//!
//! Built: perplexity with KL divergence and top-1 agreement against a baseline build
//! ([`ppl`]), and IFEval scoring identical to lm-eval's ([`ifeval`]). GSM8K and multiple
//! choice come with a later issue.

pub mod ifeval;
pub mod ppl;

use std::path::PathBuf;

/// A model that returns next-token logits for tokens appended to its current context.
pub trait LogitModel {
    fn vocab_size(&self) -> usize;
    /// Forgets the context.
    fn reset(&mut self);
    /// Appends `tokens` and returns their logits, `tokens.len() × vocab_size` values (row `i`
    /// predicts the token after `tokens[i]`).
    fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String>;
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("model failed: {0}")]
    Model(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line of a data file that cannot be used, with its 1-based line number.
    #[error("{path}:{line}: {message}")]
    Data {
        path: PathBuf,
        line: usize,
        message: String,
    },
}
