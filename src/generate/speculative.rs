//! The generation loop with speculation: each pass runs the next token and the tokens proposed
//! after it as one [`Model::verify`] pass, samples its rows in order with the same sampler plain
//! decoding uses, and keeps proposals while they equal those samples. The first sample that
//! differs (or the one after the last proposal) is the next token; the cache is truncated back
//! past the rows whose tokens were not kept. Every kept token goes through
//! [`Sequence::take`] as in plain decoding, so answers end at the same token for the same
//! reason, and the cache is left holding what plain decoding would leave: every token but the
//! last one sampled.

use super::{Control, Generation, Sequence};
use crate::model::{Model, State};
use crate::sampler::Sampler;
use crate::speculate::{SpecStats, Speculator};
use crate::Error;
use std::time::Instant;

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    model: &Model,
    state: &mut State,
    context: &[u32],
    prompt: &[u32],
    sampler: &mut Sampler,
    stop_ids: &[u32],
    max_tokens: usize,
    spec: &mut Speculator,
    mut on_token: impl FnMut(u32) -> Control,
) -> Result<Generation, Error> {
    if context.len() != state.cache.len() {
        return Err(Error::Invalid(format!(
            "speculation needs the {} token ids already in the cache, but was given {}",
            state.cache.len(),
            context.len()
        )));
    }
    let start = Instant::now();
    let mut next = super::prefill(model, state, prompt, sampler)?;
    let prefill_time = start.elapsed();

    let start = Instant::now();
    // Every token whose keys are in the cache, then `next` (sampled, not yet run).
    let mut ctx: Vec<u32> = Vec::with_capacity(context.len() + prompt.len() + max_tokens);
    ctx.extend_from_slice(context);
    ctx.extend_from_slice(prompt);
    let capacity = state.cache.capacity();
    let mut seq = Sequence::new(stop_ids, max_tokens);
    let mut stats = SpecStats::default();
    let finish_reason = loop {
        let end = seq.take(next, capacity - ctx.len(), sampler, &mut on_token);
        if let Some(reason) = end {
            break reason;
        }
        ctx.push(next);
        // Proposals must fit the cache beside `next` and be worth keeping under the budget.
        let room = (capacity - ctx.len()).min(max_tokens - seq.tokens.len());
        let proposed = spec.propose(&ctx, room, sampler)?;
        let mut rows = Vec::with_capacity(1 + proposed.len());
        rows.push(next);
        rows.extend_from_slice(&proposed);
        let pass = Instant::now();
        let batch;
        let logits: &[f32] = if proposed.is_empty() {
            model
                .step(state, next, true)?
                .expect("logits were requested")
        } else {
            batch = model.verify(state, &rows)?;
            &batch
        };
        let elapsed = pass.elapsed();
        stats.passes += 1;
        stats.proposed += proposed.len();
        let mut kept = 0;
        let mut end = None;
        for (j, row) in logits.chunks_exact(model.spec.vocab_size).enumerate() {
            let t = sampler.sample(row);
            if proposed.get(j) != Some(&t) {
                next = t;
                break;
            }
            kept += 1;
            end = seq.take(t, capacity - ctx.len(), sampler, &mut on_token);
            if end.is_some() {
                break;
            }
            ctx.push(t);
        }
        stats.accepted += kept;
        spec.observe(proposed.len(), kept, elapsed);
        // Rows after the last kept token (the rejected proposals) leave the cache; when the
        // answer ended, so does the row of its last token, as plain decoding never ran it.
        state.cache.truncate(ctx.len());
        if let Some(reason) = end {
            break reason;
        }
    };
    Ok(Generation {
        tokens: seq.tokens,
        finish_reason,
        prefill_tokens: prompt.len(),
        prefill_time,
        decode_time: start.elapsed(),
        forced_tokens: 0,
        speculation: Some(stats),
    })
}
