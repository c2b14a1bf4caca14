//! Several answers generated together (evaluation runs): each sequence keeps its own KV cache,
//! sampler and stop conditions, and every decode step runs the active sequences as one batch
//! through [`Model::step_many`], so each weight row is decoded once per step for all of them.
//! Each answer ends exactly as [`generate_text`](crate::generate::generate_text) would end it
//! (stop ids, stop strings, length, full context), and its text is cut the same way.

use crate::generate::{
    first_stop, FinishReason, Generation, StopAt, StopStrings, TextGeneration, PREFILL_CHUNK,
};
use crate::model::{Logits, Model, State};
use crate::sampler::Sampler;
use crate::tokenizer::{TextStream, TextTokenizer};
use crate::Error;
use std::time::Instant;

/// One sequence of a batch.
pub struct BatchItem<'a> {
    pub prompt: Vec<u32>,
    pub stop: StopAt<'a>,
}

struct Live<'t, 's> {
    next: u32,
    tokens: Vec<u32>,
    stream: TextStream<'t>,
    scan: StopStrings<'s>,
    finish: Option<FinishReason>,
    prefill: std::time::Duration,
}

/// Generates every item's answer; `states[i]` and `samplers[i]` serve `items[i]` (their caches
/// are cleared first).
pub fn generate_text_batch<'t, 's>(
    model: &Model,
    tokenizer: &'t TextTokenizer,
    states: &mut [State],
    samplers: &mut [Sampler],
    items: &[BatchItem<'s>],
) -> Result<Vec<TextGeneration>, Error> {
    if states.len() < items.len() || samplers.len() < items.len() {
        return Err(Error::Invalid(
            "generate_text_batch: fewer states than items".into(),
        ));
    }
    let mut live: Vec<Live<'t, 's>> = Vec::with_capacity(items.len());
    for ((item, state), sampler) in items.iter().zip(states.iter_mut()).zip(samplers.iter_mut()) {
        state.cache.clear();
        let p = &item.prompt;
        if p.is_empty() {
            return Err(Error::Invalid("the prompt has no tokens".into()));
        }
        if p.len() > state.cache.capacity() {
            return Err(Error::Invalid(format!(
                "the prompt needs {} positions but only {} are free",
                p.len(),
                state.cache.capacity()
            )));
        }
        let start = Instant::now();
        p.iter().for_each(|&id| sampler.accept(id));
        let mut next = 0;
        for (i, chunk) in p.chunks(PREFILL_CHUNK).enumerate() {
            let last = (i + 1) * PREFILL_CHUNK >= p.len();
            let logits = model.forward_batch(
                state,
                chunk,
                if last { Logits::Last } else { Logits::None },
            )?;
            if last {
                next = sampler.sample(&logits);
            }
        }
        live.push(Live {
            next,
            tokens: Vec::new(),
            stream: TextStream::new(tokenizer),
            scan: StopStrings::new(item.stop.strings),
            finish: None,
            prefill: start.elapsed(),
        });
    }
    let start = Instant::now();
    loop {
        // Take each active sequence's pending token, as `generate`'s loop does.
        for (b, l) in live.iter_mut().enumerate() {
            if l.finish.is_some() {
                continue;
            }
            let stop = &items[b].stop;
            if stop.ids.contains(&l.next) {
                l.finish = Some(FinishReason::Stop);
                continue;
            }
            l.tokens.push(l.next);
            samplers[b].accept(l.next);
            let piece = l.stream.push(l.next).unwrap_or_default();
            l.scan.push(&piece);
            if l.scan.stopped() {
                l.finish = Some(FinishReason::Stop);
            } else if l.tokens.len() >= stop.max_tokens {
                l.finish = Some(FinishReason::Length);
            } else if states[b].cache.len() >= states[b].cache.capacity() {
                l.finish = Some(FinishReason::Context);
            }
        }
        let active: Vec<usize> = (0..live.len())
            .filter(|&b| live[b].finish.is_none())
            .collect();
        if active.is_empty() {
            break;
        }
        let tokens: Vec<u32> = active.iter().map(|&b| live[b].next).collect();
        let mut refs: Vec<&mut State> = states
            .iter_mut()
            .enumerate()
            .filter(|(b, _)| active.contains(b))
            .map(|(_, s)| s)
            .collect();
        let logits = model.step_many(&mut refs, &tokens)?;
        let vocab = model.spec.vocab_size;
        for (row, &b) in active.iter().enumerate() {
            live[b].next = samplers[b].sample(&logits[row * vocab..(row + 1) * vocab]);
        }
    }
    let decode = start.elapsed();
    Ok(live
        .into_iter()
        .zip(items)
        .map(|(mut l, item)| {
            // The text as `generate_text` cuts it.
            if !l.scan.stopped() {
                let rest = l.stream.finish().unwrap_or_default();
                l.scan.push(&rest);
                if l.scan.stopped() {
                    l.finish = Some(FinishReason::Stop);
                }
            }
            let full = tokenizer.decode(&l.tokens, true);
            let text = match first_stop(&full, item.stop.strings) {
                Some(at) if l.scan.stopped() => full[..at].to_string(),
                _ => full,
            };
            TextGeneration {
                generation: Generation {
                    tokens: l.tokens,
                    finish_reason: l.finish.unwrap_or(FinishReason::Length),
                    prefill_tokens: item.prompt.len(),
                    prefill_time: l.prefill,
                    decode_time: decode,
                },
                text,
            }
        })
        .collect())
}
