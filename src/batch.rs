//! Several answers generated together (evaluation runs): each sequence keeps its own KV cache,
//! sampler and stop conditions, and every decode step runs the active sequences as one batch
//! through [`Model::step_many`], so each weight row is decoded once per step for all of them.
//! Each answer ends exactly as [`generate_text`](crate::generate::generate_text) would end it
//! (stop ids, stop strings, length, full context), and its text is cut the same way.
//!
//! Evaluation prompts mostly begin alike (GSM8K's eight worked examples, a BBH task's three,
//! MATH's four), so with `share_prefix` a new item starts from the cache of the slot whose
//! prompt shares the longest beginning with its own, and runs only the rest: from the last
//! shared token when the model's rows do not depend on how a run is cut (the int8 path), else
//! from the last whole prefill chunk ([`resume_point`]). Either way the answers are bit for
//! bit a fresh prefill's.

use crate::generate::answer::{Answer, Next};
use crate::generate::resume_point;
use crate::generate::{check_room, FinishReason, Generation, StopAt, TextGeneration};
use crate::model::{Model, State};
use crate::sampler::Sampler;
use crate::tokenizer::TextTokenizer;
use crate::Error;
use std::time::Instant;

/// One sequence of a batch.
pub struct BatchItem<'a> {
    pub prompt: Vec<u32>,
    pub stop: StopAt<'a>,
}

struct Live<'a> {
    /// The answer's state machine (the one the server drives), with its sampler.
    answer: Answer<'a>,
    next: u32,
    /// `next` has not been taken into the answer yet.
    pending: bool,
    /// Prompt tokens run (the rest came from a shared prefix).
    run: usize,
    prefill: std::time::Duration,
    decode: std::time::Duration,
}

/// Continuous batching: `states.len()` sequences run at once; when one answer ends, the next
/// item takes its slot at the following step, so long answers never leave the batch half
/// empty. `done(i, answer)` is called as each item finishes (in finishing order); its
/// `prefill_tokens` are the prompt tokens run, not those taken from a shared prefix.
pub fn generate_text_queue<'t, 's>(
    model: &Model,
    tokenizer: &'t TextTokenizer,
    states: &mut [State],
    mut new_sampler: impl FnMut() -> Sampler,
    items: &[BatchItem<'s>],
    share_prefix: bool,
    mut done: impl FnMut(usize, TextGeneration) -> Result<(), Error>,
) -> Result<(), Error> {
    if states.is_empty() {
        return Err(Error::Invalid("generate_text_queue: no states".into()));
    }
    let mut slots: Vec<Option<(usize, Live)>> = states.iter().map(|_| None).collect();
    // The prompt each slot's cache begins with (kept after its answer ends). A state's cache
    // from before this call is not trusted.
    let mut held: Vec<&[u32]> = states.iter().map(|_| &[][..]).collect();
    let mut next_item = 0;
    let vocab = model.spec.vocab_size;
    loop {
        // Empty slots take the next items (prefill gives each its first token).
        for b in 0..slots.len() {
            if slots[b].is_none() && next_item < items.len() {
                let item = &items[next_item];
                let from = match share_prefix {
                    true => start_from(model, states, &held, b, &item.prompt),
                    false => {
                        states[b].cache.clear();
                        0
                    }
                };
                let live = prefill(model, tokenizer, &mut states[b], new_sampler(), item, from)?;
                held[b] = &item.prompt;
                slots[b] = Some((next_item, live));
                next_item += 1;
            }
        }
        // Each sequence takes its pending token, as `generate`'s loop does.
        for (slot, state) in slots.iter_mut().zip(states.iter()) {
            let Some((_, l)) = slot.as_mut() else {
                continue;
            };
            if !l.pending {
                continue;
            }
            l.pending = false;
            let free = state.cache.capacity() - state.cache.len();
            if let Next::Done(reason) = l.answer.advance(l.next, free, |_| {})? {
                let (i, l) = slot.take().expect("live slot");
                done(i, finish(l, reason))?;
            }
        }
        let active: Vec<usize> = (0..slots.len()).filter(|&b| slots[b].is_some()).collect();
        if active.is_empty() {
            if next_item >= items.len() {
                return Ok(());
            }
            continue;
        }
        if active.len() < slots.len() && next_item < items.len() {
            continue; // refill the freed slots before the next step
        }
        let tokens: Vec<u32> = active
            .iter()
            .map(|&b| slots[b].as_ref().expect("active").1.next)
            .collect();
        let mut refs: Vec<&mut State> = states
            .iter_mut()
            .enumerate()
            .filter(|(b, _)| slots[*b].is_some())
            .map(|(_, s)| s)
            .collect();
        let start = Instant::now();
        let logits = model.step_many(&mut refs, &tokens)?;
        let spent = start.elapsed();
        for (row, &b) in active.iter().enumerate() {
            let (_, l) = slots[b].as_mut().expect("active");
            l.next = l
                .answer
                .sampler
                .sample(&logits[row * vocab..(row + 1) * vocab]);
            l.pending = true;
            l.decode += spent;
        }
    }
}

/// Readies slot `b`'s cache for `prompt` and returns the positions it already holds: the
/// longest [`resume_point`] of the beginning any slot's prompt shares with this one, kept in
/// place or copied from that slot; 0 with the cache cleared when none is shared or the copy is
/// refused.
fn start_from(
    model: &Model,
    states: &mut [State],
    held: &[&[u32]],
    b: usize,
    prompt: &[u32],
) -> usize {
    let shared = |h: &[u32]| {
        let common = crate::generate::common_prefix(h, prompt);
        resume_point(model, prompt.len(), common)
    };
    // The slot itself first: on a tie its cache is kept without a copy.
    let best = std::iter::once(b)
        .chain((0..held.len()).filter(|&s| s != b))
        .map(|s| (s, shared(held[s])))
        .fold((b, 0), |best, c| if c.1 > best.1 { c } else { best });
    let ok = match best {
        (_, 0) => false,
        (s, n) if s == b => states[b].cache.keep_prefix(n),
        (s, n) => {
            let (src, dst) = if s < b {
                let (lo, hi) = states.split_at_mut(b);
                (&lo[s], &mut hi[0])
            } else {
                let (lo, hi) = states.split_at_mut(s);
                (&hi[0], &mut lo[b])
            };
            dst.cache.assign_prefix(&src.cache, n)
        }
    };
    if ok {
        best.1
    } else {
        states[b].cache.clear();
        0
    }
}

fn prefill<'a>(
    model: &Model,
    tokenizer: &'a TextTokenizer,
    state: &mut State,
    sampler: Sampler,
    item: &'a BatchItem,
    from: usize,
) -> Result<Live<'a>, Error> {
    let p = &item.prompt;
    // The slot's cache is cleared or holds the shared start `from`: room is the whole cache.
    check_room(p, state.cache.capacity(), state.cache.capacity())?;
    let start = Instant::now();
    let mut answer = Answer::new(
        tokenizer,
        item.stop.ids,
        item.stop.strings.to_vec(),
        item.stop.max_tokens,
        sampler,
        None,
        &[],
        &[],
    );
    let next = crate::generate::prefill_after(model, state, p, from, &mut answer.sampler)?;
    Ok(Live {
        answer,
        run: p.len() - from,
        next,
        pending: true,
        prefill: start.elapsed(),
        decode: std::time::Duration::ZERO,
    })
}

/// The answer's text, cut as `generate_text` cuts it.
fn finish(mut l: Live, reason: FinishReason) -> TextGeneration {
    let end = l.answer.finish(reason);
    TextGeneration {
        generation: Generation {
            forced_tokens: 0,
            speculation: None,
            tokens: std::mem::take(&mut l.answer.seq.tokens),
            finish_reason: end.reason,
            prefill_tokens: l.run,
            prefill_time: l.prefill,
            decode_time: l.decode,
        },
        text: end.text,
        complete: end.complete,
    }
}
