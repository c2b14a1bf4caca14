//! The generation loop: prefill the prompt, then sample token by token until an end-of-sequence
//! token, the token budget, the context limit, or the caller says stop.

use crate::model::{Logits, Model, State};

/// Prompt tokens run per batch: bounds the activations' memory at long prompts.
const PREFILL_CHUNK: usize = 256;
use crate::sampler::Sampler;
use crate::Error;
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-sequence token.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context window is full.
    Context,
    /// The caller asked to stop (e.g. Ctrl-C).
    Interrupted,
}

#[derive(Debug, Serialize)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub finish_reason: FinishReason,
    /// Prompt tokens actually run (those already in the KV cache are skipped).
    pub prefill_tokens: usize,
    #[serde(serialize_with = "ms")]
    pub prefill_time: Duration,
    #[serde(serialize_with = "ms")]
    pub decode_time: Duration,
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Generation {
    pub fn prefill_tok_per_s(&self) -> f64 {
        self.prefill_tokens as f64 / self.prefill_time.as_secs_f64().max(1e-9)
    }

    /// Decode speed over the tokens after the first (the first comes from the prefill logits).
    pub fn decode_tok_per_s(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// What the caller wants after each token.
pub enum Control {
    Continue,
    Stop,
}

/// Runs `prompt` (all of it is new: the caller truncates the cache to the shared prefix first)
/// and generates up to `max_tokens`, calling `on_token` for each new token.
pub fn generate(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop_ids: &[u32],
    max_tokens: usize,
    mut on_token: impl FnMut(u32) -> Control,
) -> Result<Generation, Error> {
    if prompt.is_empty() {
        return Err(Error::Invalid("the prompt has no tokens".into()));
    }
    let room = state.cache.capacity().saturating_sub(state.cache.len());
    if prompt.len() > room {
        return Err(Error::Invalid(format!(
            "the prompt needs {} positions but only {room} of {} are free",
            prompt.len(),
            state.cache.capacity()
        )));
    }
    let start = Instant::now();
    let mut next = 0;
    for (i, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
        let last = (i + 1) * PREFILL_CHUNK >= prompt.len();
        let logits =
            model.forward_batch(state, chunk, if last { Logits::Last } else { Logits::None })?;
        if last {
            next = sampler.sample(&logits);
        }
    }
    let prefill_time = start.elapsed();

    let start = Instant::now();
    let mut tokens = Vec::new();
    let finish_reason = loop {
        if stop_ids.contains(&next) {
            break FinishReason::Stop;
        }
        tokens.push(next);
        if let Control::Stop = on_token(next) {
            break FinishReason::Interrupted;
        }
        if tokens.len() >= max_tokens {
            break FinishReason::Length;
        }
        if state.cache.len() >= state.cache.capacity() {
            break FinishReason::Context;
        }
        next = sample_step(model, state, next, sampler)?;
    };
    Ok(Generation {
        tokens,
        finish_reason,
        prefill_tokens: prompt.len(),
        prefill_time,
        decode_time: start.elapsed(),
    })
}

fn sample_step(
    model: &Model,
    state: &mut State,
    token: u32,
    sampler: &mut Sampler,
) -> Result<u32, Error> {
    let logits = model
        .step(state, token, true)?
        .expect("logits were requested");
    Ok(sampler.sample(logits))
}
