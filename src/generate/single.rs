//! The single-stream generation loop, with or without a constraint: each turn is
//! [`guide_step`] (the one rule for a sampled token, shared with the server's and the batched
//! eval's [`Answer`](super::answer::Answer)), then one forward pass. Without a guide a turn
//! is one token through [`Model::step`]. Under a constraint three things make it cheap:
//! - the next mask is computed on its own thread while the forward pass runs (both need only
//!   the tokens so far);
//! - tokens the constraint forces (a schema's keys, quotes, commas) are appended without
//!   sampling and run through the model as one batch, like a prompt chunk;
//! - sampling reads only the allowed ids ([`Sampler::sample_allowed`]), so the mask is never
//!   a second pass over the logits.

use super::answer::{guide_step, Next};
use super::{Control, Generation, Sequence, PREFILL_CHUNK};
use crate::constrain::Guide;
use crate::model::{Logits, Model, State};
use crate::sampler::Sampler;
use crate::Error;
use std::time::Instant;

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop_ids: &[u32],
    max_tokens: usize,
    mut guide: Option<&mut Guide>,
    mut on_token: impl FnMut(u32) -> Control,
) -> Result<Generation, Error> {
    prompt.iter().for_each(|&id| sampler.accept(id));
    let start = Instant::now();
    let mut next = match guide.as_deref_mut() {
        Some(g) if g.active() => forward_sample(model, state, prompt, g, sampler)?,
        _ => super::prefill_sampled(model, state, prompt, 0, sampler)?,
    };
    let prefill_time = start.elapsed();

    let start = Instant::now();
    let mut seq = Sequence::new(stop_ids, max_tokens);
    let mut forced_tokens = 0;
    let capacity = state.cache.capacity();
    let finish_reason = loop {
        let free = capacity - state.cache.len();
        let step = guide_step(
            guide.as_deref_mut(),
            next,
            free,
            &mut forced_tokens,
            |t, room, _| seq.take(t, room, sampler, &mut on_token),
        )?;
        next = match (step, guide.as_deref_mut()) {
            (Next::Done(reason), _) => break reason,
            (
                Next::Run {
                    masked: true,
                    forced,
                },
                Some(g),
            ) => {
                let mut run = Vec::with_capacity(1 + forced.len());
                run.push(next);
                run.extend_from_slice(&forced);
                forward_sample(model, state, &run, g, sampler)?
            }
            (Next::Run { .. }, _) => super::sample_step(model, state, next, sampler)?,
        };
    };
    Ok(Generation {
        tokens: seq.tokens,
        finish_reason,
        prefill_tokens: prompt.len(),
        prefill_time,
        decode_time: start.elapsed(),
        forced_tokens,
        speculation: None,
    })
}

/// Runs `tokens` (in prompt-sized chunks) and samples the next token from those the guide
/// allows after them. The mask is computed on a second thread during the last chunk's
/// forward pass: it depends only on the tokens, which the guide has already consumed.
fn forward_sample(
    model: &Model,
    state: &mut State,
    tokens: &[u32],
    guide: &mut Guide,
    sampler: &mut Sampler,
) -> Result<u32, Error> {
    let split = tokens.len() - (tokens.len() - 1) % PREFILL_CHUNK - 1;
    for chunk in tokens[..split].chunks(PREFILL_CHUNK) {
        model.forward_batch(state, chunk, Logits::None)?;
    }
    let last = &tokens[split..];
    let mut waited = std::time::Duration::ZERO;
    let next = std::thread::scope(|s| {
        let mask = s.spawn(|| guide.mask());
        let batch;
        let logits: &[f32] = if let [one] = last {
            model
                .step(state, *one, true)?
                .expect("logits were requested")
        } else {
            batch = model.forward_batch(state, last, Logits::Last)?;
            &batch
        };
        let ready = Instant::now();
        let mask = match mask.join() {
            Ok(m) => m?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        waited = ready.elapsed();
        sampler
            .sample_allowed(logits, mask.as_slice())
            .ok_or_else(|| {
                Error::Invalid(
                    "the constraint allows no token of this vocabulary here (a grammar that \
                     needs text the tokenizer cannot write?)"
                        .into(),
                )
            })
    });
    guide.mask_wait += waited;
    next
}
