//! Evaluation tasks and scoring for pocket. Tasks talk to a model only through the small
//! traits here, so scoring is testable without a model and the engine stays out of this crate.
//!
//! Built: perplexity with KL divergence and top-1 agreement against a baseline build
//! ([`ppl`]); IFEval scoring identical to lm-eval's ([`ifeval`]); GSM8K, MATH-500 and BBH
//! prompts and scoring as lm-eval 0.4.13 defines them ([`gsm8k`], [`math`], [`bbh`]); multiple
//! choice by log-likelihood: MMLU, ARC, HellaSwag, GPQA ([`mc`]); HumanEval and MBPP scored by
//! execution in a sandbox ([`code`]); a user's own tasks ([`custom`]); the model card's suite
//! as one list ([`suite`]); resumable per-item result logs ([`runlog`]), results and the paired
//! comparison of two runs ([`results`], [`compare`], [`stats`]).

pub mod bbh;
pub mod code;
pub mod compare;
pub mod custom;
pub mod gsm8k;
pub mod ifeval;
pub mod jsonl;
pub mod math;
pub mod mc;
pub mod ppl;
pub mod py_dumps;
pub mod results;
pub mod runlog;
pub mod shards;
pub mod stats;
pub mod suite;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A model that returns next-token logits for tokens appended to its current context.
pub trait LogitModel {
    fn vocab_size(&self) -> usize;
    /// Forgets the context.
    fn reset(&mut self);
    /// Appends `tokens` and returns their logits, `tokens.len() × vocab_size` values (row `i`
    /// predicts the token after `tokens[i]`).
    fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String>;
    /// Appends `tokens` whose logits are not wanted (a context's early chunks). A model that
    /// can skip its output head for them says so here; the positions it stores must be those
    /// [`logits`](LogitModel::logits) stores, so later scores do not change.
    fn advance(&mut self, tokens: &[u32]) -> Result<(), String> {
        self.logits(tokens).map(drop)
    }
    /// Keeps only the first `len` positions of the context, so several continuations can be
    /// scored after one run of a shared prefix. Returns false when the model cannot (the
    /// default); callers then [`reset`](LogitModel::reset) and run the prefix again.
    fn rewind(&mut self, len: usize) -> bool {
        let _ = len;
        false
    }
    /// The longest token sequence one context holds, if bounded: log-likelihood requests
    /// longer than it lose their oldest context tokens, as lm-eval's do.
    fn max_len(&self) -> Option<usize> {
        None
    }
}

/// Text to token ids, the way the harness's `tok_encode` does it for the model (the
/// tokenizer's own special tokens, unless the text already starts with the BOS text).
pub trait Tokenize {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
}

/// One message of a chat prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What a task asks the model to continue: plain text, or a conversation that the engine
/// renders through the model's chat template with the generation prompt (lm-eval's
/// `--apply_chat_template`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    Chat(Vec<ChatMessage>),
    /// A conversation whose answer the model continues from the given start (lm-eval's
    /// `gen_prefix` under a chat template: an assistant message rendered with
    /// `continue_final_message`, i.e. the generation prompt followed by the prefix).
    ChatContinued(Vec<ChatMessage>, String),
}

/// A generation, as lm-eval's `generate_until` request: continue `prompt` until an
/// end-of-sequence token, one of `until`, or `max_gen_toks` tokens. Greedy unless `sampling`.
#[derive(Clone, Debug, PartialEq)]
pub struct GenRequest {
    pub prompt: Prompt,
    pub until: Vec<String>,
    pub max_gen_toks: usize,
    pub sampling: Option<Sampling>,
    /// The answer's shape, enforced while decoding (custom tasks' `generation.constrain`);
    /// stop strings do not apply under it.
    pub constraint: Option<AnswerConstraint>,
}

/// A constraint on a generated answer, as a task states it; the engine compiles it into a
/// token mask (pocket's constrained decoding), so the answer parses whatever the model prefers.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerConstraint {
    /// One JSON value valid under this schema.
    JsonSchema(serde_json::Value),
    /// Text matching the regular expression in full.
    Regex(String),
    /// Exactly one of the labels.
    Choices(Vec<String>),
    /// A grammar in llguidance's Lark dialect or GBNF.
    Grammar(String),
}

/// Sampled decoding for one request (pass@k's samples); the seed makes it repeatable, also
/// when a run is resumed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

/// A model that answers [`GenRequest`]s.
pub trait TextGenerator {
    /// The greedy continuation, decoded without special tokens and cut before the first stop
    /// string (lm-eval's post-processing).
    fn generate(&mut self, request: &GenRequest) -> Result<String, String>;
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
