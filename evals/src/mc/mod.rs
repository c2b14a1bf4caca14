//! Multiple choice by log-likelihood, as lm-eval's `multiple_choice` tasks: each choice is a
//! continuation of the question's context, scored by the sum of its tokens' log-probabilities.
//! `acc` takes the most likely choice; `acc_norm` divides each log-likelihood by the choice's
//! length in characters (lm-eval 0.4.13 divides by `len(choice)`, a Python character count,
//! though its docs speak of bytes); `acc_bytes` by its UTF-8 length. Ties go to the first
//! choice, as `np.argmax`.
//!
//! Tokens as in lm-eval's `_encode_pair`: trailing spaces of the context move to the
//! continuation, the context is encoded alone and the continuation is what the whole text adds
//! beyond the context's token count. A request longer than the model's window loses its oldest
//! context tokens, as lm-eval's Hugging Face loglikelihood truncates. The context's tokens are the same for every choice, so
//! they run once and each choice continues from a [rewound](LogitModel::rewind) copy of that
//! state; a model that cannot rewind runs the context again per choice (same numbers, more
//! work).

pub mod benchmarks;
pub mod data;

use crate::ppl::{argmax, log_softmax};
use crate::{EvalError, LogitModel, Tokenize};
pub use data::{load_items, McItem};
use serde::{Deserialize, Serialize};

/// Tokens fed per call: bounds the logits held at once (chunk × vocab floats).
const CHUNK: usize = 64;

/// How a question becomes a context and its choices continuations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// ARC's: "Question: {question}\nAnswer:" continued by " {choice}".
    Cloze,
    /// MMLU's: "{question}\nA. {choice}\nB. …\nAnswer:" continued by " A", " B", …
    Letters,
}

impl Style {
    pub fn parse(name: &str) -> Option<Style> {
        match name {
            "cloze" => Some(Style::Cloze),
            "letters" => Some(Style::Letters),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Style::Cloze => "cloze",
            Style::Letters => "letters",
        }
    }
}

/// The loglikelihood requests of one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McRequest {
    pub context: String,
    /// What is scored: target delimiter + choice.
    pub continuations: Vec<String>,
    /// What lengths are measured on (lm-eval's `doc_to_choice`, without the delimiter).
    pub choice_texts: Vec<String>,
}

/// The context without trailing spaces and the continuations with them, as lm-eval's
/// `_encode_pair` splits a request: what constrained decoding then writes after the context.
pub fn split_trailing_space(req: &McRequest) -> (String, Vec<String>) {
    let context = req.context.trim_end_matches(' ');
    let moved = &req.context[context.len()..];
    let conts = req
        .continuations
        .iter()
        .map(|c| format!("{moved}{c}"))
        .collect();
    (context.to_string(), conts)
}

pub fn request(item: &McItem, style: Style) -> McRequest {
    let (context, choice_texts) = match style {
        Style::Cloze => (
            format!("Question: {}\nAnswer:", item.question),
            item.choices.clone(),
        ),
        Style::Letters => {
            let letters: Vec<String> = (0..item.choices.len())
                .map(|i| char::from(b'A' + i as u8).to_string())
                .collect();
            let mut context = crate::ifeval::pytext::strip(&item.question).to_string();
            for (l, c) in letters.iter().zip(&item.choices) {
                context.push_str(&format!("\n{l}. {c}"));
            }
            context.push_str("\nAnswer:");
            (context, letters)
        }
    };
    McRequest {
        context,
        continuations: choice_texts.iter().map(|c| format!(" {c}")).collect(),
        choice_texts,
    }
}

/// One choice's log-likelihood and whether greedy decoding would have produced it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChoiceScore {
    pub ll: f64,
    pub is_greedy: bool,
}

/// Scores and the work it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    pub choices: Vec<ChoiceScore>,
    /// Tokens run through the model (the shared context once, or once per choice).
    pub tokens_run: usize,
}

/// `_encode_pair`: (context tokens, continuation tokens).
pub fn encode_pair(
    tok: &dyn Tokenize,
    context: &str,
    continuation: &str,
) -> Result<(Vec<u32>, Vec<u32>), EvalError> {
    // Python's `rstrip()`: its whitespace set, not Rust's.
    let ctx = crate::ifeval::pytext::rstrip(context);
    let spaces = &context[ctx.len()..];
    let continuation = format!("{spaces}{continuation}");
    let whole = tok
        .encode(&format!("{ctx}{continuation}"))
        .map_err(EvalError::Model)?;
    let ctx_ids = tok.encode(ctx).map_err(EvalError::Model)?;
    let cont = whole.get(ctx_ids.len()..).unwrap_or_default().to_vec();
    Ok((ctx_ids, cont))
}

/// Feeds `tokens` in chunks; returns the logits rows at the positions in `keep` (indices into
/// `tokens`).
fn run(
    model: &mut dyn LogitModel,
    tokens: &[u32],
    keep: std::ops::Range<usize>,
) -> Result<Vec<Vec<f32>>, EvalError> {
    let vocab = model.vocab_size();
    let mut rows = Vec::with_capacity(keep.len());
    for (c, chunk) in tokens.chunks(CHUNK).enumerate() {
        let base = c * CHUNK;
        if base + chunk.len() <= keep.start {
            // Still needed to advance the context; logits unused.
            model.advance(chunk).map_err(EvalError::Model)?;
            continue;
        }
        let logits = model.logits(chunk).map_err(EvalError::Model)?;
        for i in 0..chunk.len() {
            if keep.contains(&(base + i)) {
                rows.push(logits[i * vocab..(i + 1) * vocab].to_vec());
            }
        }
    }
    Ok(rows)
}

/// Log-likelihood of every continuation after `context`. With `share_prefix`, the context
/// runs once and the model is rewound to it before each choice (when it can rewind).
pub fn loglikelihoods(
    model: &mut dyn LogitModel,
    tok: &dyn Tokenize,
    req: &McRequest,
    share_prefix: bool,
) -> Result<Scored, EvalError> {
    loglikelihoods_after(model, tok, req, share_prefix, &mut Vec::new())
}

/// [`loglikelihoods`] for a run of requests whose contexts share beginnings (MMLU's five
/// examples of a subject): `held` is the context the model holds from the previous request
/// (empty at first; this function keeps it), and the whole 64-token chunks of it that the new
/// context begins with are kept instead of run again. Only whole chunks: they were computed
/// from position 0 in the same chunks a fresh run would use, so every score is bit for bit the
/// fresh run's. Without `share_prefix` nothing is kept.
pub fn loglikelihoods_after(
    model: &mut dyn LogitModel,
    tok: &dyn Tokenize,
    req: &McRequest,
    share_prefix: bool,
    held: &mut Vec<u32>,
) -> Result<Scored, EvalError> {
    let mut tokens_run = 0;
    let mut choices = Vec::with_capacity(req.continuations.len());
    // (context ids, the row predicting the first continuation token) when shared.
    let mut shared: Option<(Vec<u32>, Vec<f32>)> = None;
    for continuation in &req.continuations {
        let (mut ctx, cont) = encode_pair(tok, &req.context, continuation)?;
        if let Some(max) = model.max_len() {
            // lm-eval's `(context + continuation)[-(max_length + 1):][:-1]`: the oldest
            // context tokens go; a continuation that alone overflows cannot be scored.
            if cont.len() >= max {
                return Err(EvalError::Invalid(format!(
                    "a continuation of {} tokens does not fit a context of {max}",
                    cont.len()
                )));
            }
            let keep = max + 1 - cont.len();
            if ctx.len() > keep {
                ctx.drain(..ctx.len() - keep);
            }
        }
        if ctx.is_empty() {
            return Err(EvalError::Invalid(format!(
                "the context {:?} has no tokens",
                req.context
            )));
        }
        if cont.is_empty() {
            choices.push(ChoiceScore {
                ll: 0.0,
                is_greedy: true,
            });
            continue;
        }
        let reusable = match &shared {
            Some((ids, _)) if *ids == ctx => model.rewind(ctx.len()),
            _ => false,
        };
        let first_row = if reusable {
            shared
                .as_ref()
                .map(|(_, row)| row.clone())
                .unwrap_or_default()
        } else {
            // Whole chunks of the held context that this one starts with, leaving at least
            // the last token to run (its logits predict the continuation).
            let common = held
                .iter()
                .zip(&ctx)
                .take_while(|(a, b)| a == b)
                .count()
                .min(ctx.len() - 1);
            let keep = if share_prefix {
                common / CHUNK * CHUNK
            } else {
                0
            };
            let kept = keep > 0 && model.rewind(keep);
            held.clear();
            if !kept {
                model.reset();
            }
            let start = if kept { keep } else { 0 };
            tokens_run += ctx.len() - start;
            let rest = &ctx[start..];
            let row = run(model, rest, rest.len() - 1..rest.len())?
                .pop()
                .ok_or_else(|| EvalError::Model("no logits for the context".into()))?;
            if share_prefix {
                held.extend_from_slice(&ctx);
                shared = Some((ctx.clone(), row.clone()));
            }
            row
        };
        // Rows predicting cont[1..] come from feeding cont[..len-1].
        let feed = &cont[..cont.len() - 1];
        tokens_run += feed.len();
        let mut rows = vec![first_row];
        rows.extend(run(model, feed, 0..feed.len())?);
        let (mut ll, mut is_greedy) = (0.0, true);
        for (row, &t) in rows.iter().zip(&cont) {
            ll += log_softmax(row)[t as usize];
            is_greedy &= argmax(row) == t as usize;
        }
        choices.push(ChoiceScore { ll, is_greedy });
    }
    Ok(Scored {
        choices,
        tokens_run,
    })
}

/// An item's predictions and scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McVerdict {
    pub pred: usize,
    pub pred_norm: usize,
    pub pred_bytes: usize,
    pub acc: bool,
    pub acc_norm: bool,
    pub acc_bytes: bool,
}

fn argmax_f64(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, v) in values.enumerate() {
        if v > best.1 || i == 0 {
            best = (i, v);
        }
    }
    best.0
}

pub fn verdict(lls: &[f64], choice_texts: &[String], gold: usize) -> McVerdict {
    let pred = argmax_f64(lls.iter().copied());
    let pred_norm = argmax_f64(
        lls.iter()
            .zip(choice_texts)
            .map(|(ll, c)| ll / c.chars().count() as f64),
    );
    let pred_bytes = argmax_f64(
        lls.iter()
            .zip(choice_texts)
            .map(|(ll, c)| ll / c.len() as f64),
    );
    McVerdict {
        pred,
        pred_norm,
        pred_bytes,
        acc: pred == gold,
        acc_norm: pred_norm == gold,
        acc_bytes: pred_bytes == gold,
    }
}
