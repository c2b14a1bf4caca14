//! Decision jobs in the engine's loop: their shared tokens batched across decisions, then
//! every ready decision read in one pass.

use super::{add, end_job, fail, Slot};
use crate::generate::PREFILL_CHUNK;
use crate::loader::LoadedModel;
use crate::model::{Logits, State};
use crate::serving::prompt_cache::PromptCache;
use crate::serving::{Event, Shared};
use crate::Error;
use std::time::Instant;

/// Several decisions' shared tokens in one pass: each waiting decision's next prompt chunk (as
/// the worker's `run_prompts` would cut it) as its own sequence, oldest first, up to two chunks' worth of
/// tokens, so concurrent decisions read the weights once per step instead of once each. Only
/// when the model's prompt rows do not depend on how runs are cut and batched
/// ([`Model::prompt_cuts_exact`](crate::model::Model::prompt_cuts_exact)): a lone decision, or
/// any on the W4A16 path, runs in the worker's `run_prompts` as a single stream's prefill does.
pub(super) fn run_prompts(
    m: &LoadedModel,
    shared: &Shared,
    slots: &mut [Slot],
    kept: &mut PromptCache,
    tick: u64,
) {
    if !m.model.prompt_cuts_exact() {
        return;
    }
    let mut waiting: Vec<(u64, usize, usize)> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let l = s.live.as_ref()?;
            l.decision.as_ref()?;
            let n = l.remaining().min(PREFILL_CHUNK);
            (n > 0).then_some((l.order, i, n))
        })
        .collect();
    if waiting.len() < 2 {
        return;
    }
    waiting.sort();
    let mut total = 0;
    let mut chosen: Vec<(usize, usize)> = waiting
        .iter()
        .take_while(|&&(_, _, n)| {
            let first = total == 0;
            total += n;
            first || total <= 2 * PREFILL_CHUNK
        })
        .map(|&(_, i, n)| (i, n))
        .collect();
    if chosen.len() < 2 {
        return;
    }
    // The pass takes the sequences in slot order.
    chosen.sort_unstable();
    let mut tokens = Vec::new();
    let mut lens = Vec::new();
    for &(i, n) in &chosen {
        let l = slots[i].live.as_ref().expect("chosen live");
        tokens.extend_from_slice(&l.todo[l.ran..l.ran + n]);
        lens.push(n);
    }
    let result = {
        let mut states: Vec<&mut State> = slots
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| chosen.iter().any(|c| c.0 == *i))
            .map(|(_, s)| &mut s.state)
            .collect();
        m.model
            .forward(&mut states, &tokens, &lens, Logits::None, None)
    };
    add(&shared.stats.prefill_chunks, chosen.len() as u64);
    match result {
        Ok(_) => {
            for &(i, n) in &chosen {
                let slot = &mut slots[i];
                let live = slot.live.as_mut().expect("chosen live");
                let start = live.ran;
                slot.cached.extend_from_slice(&live.todo[start..start + n]);
                live.ran += n;
                if live.remaining() == 0 && live.first.is_none() {
                    kept.insert(&slot.cached, &slot.state.cache, &slot.lora_key);
                    live.first = Some(Instant::now());
                }
            }
        }
        Err(e) => {
            for &(i, _) in &chosen {
                fail(shared, &mut slots[i], Error::Invalid(e.to_string()), tick);
            }
        }
    }
}

/// Decisions whose shared tokens have run, oldest first, read together in one
/// [`evaluate_many`](crate::decide::readout::evaluate_many) call (their variants' own tokens
/// up to about a prompt chunk's worth, and at least one decision, per step).
pub(super) fn run_decisions(m: &LoadedModel, shared: &Shared, slots: &mut [Slot], tick: u64) {
    let mut ready: Vec<(u64, usize, usize)> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let l = s.live.as_ref()?;
            let d = l.decision.as_ref()?;
            (l.remaining() == 0).then(|| {
                let own = d.plan.input_tokens() - d.plan.shared;
                (l.order, i, own)
            })
        })
        .collect();
    if ready.is_empty() {
        return;
    }
    ready.sort();
    let mut budget = 0;
    let chosen: Vec<usize> = ready
        .iter()
        .take_while(|&&(_, _, own)| {
            let first = budget == 0;
            budget += own;
            first || budget <= PREFILL_CHUNK
        })
        .map(|&(_, i, _)| i)
        .collect();
    let start = Instant::now();
    let result = {
        let mut asks: Vec<crate::decide::readout::Ask> = slots
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| chosen.contains(i))
            .map(|(_, slot)| {
                let d = slot
                    .live
                    .as_ref()
                    .and_then(|l| l.decision.as_ref())
                    .expect("a ready decision");
                crate::decide::readout::Ask {
                    state: &mut slot.state,
                    plan: &d.plan,
                    head: d.head.as_deref(),
                    hidden: false,
                }
            })
            .collect();
        crate::decide::readout::evaluate_many(&m.model, &mut asks)
    };
    add(&shared.stats.decision_passes, 1);
    let readout_time = start.elapsed();
    let mut scores = match result {
        Ok(s) => s.into_iter().map(Some).collect::<Vec<_>>(),
        Err(e) => {
            for &i in &chosen {
                fail(shared, &mut slots[i], Error::Invalid(e.to_string()), tick);
            }
            return;
        }
    };
    for (k, &i) in slots
        .iter()
        .enumerate()
        .filter(|(i, _)| chosen.contains(i))
        .map(|(i, _)| i)
        .collect::<Vec<_>>()
        .iter()
        .enumerate()
    {
        let slot = &mut slots[i];
        let mut live = slot.live.take().expect("live");
        slot.used = tick;
        slot.cached.truncate(slot.state.cache.len());
        let prefill_time = live.first.map_or(std::time::Duration::ZERO, |f| {
            f.duration_since(live.admitted)
        });
        end_job(shared, true, |s| &s.finished);
        add(&shared.stats.decisions, 1);
        live.sink.send(Event::Decided(crate::serving::Decided {
            scores: scores[k].take().expect("one score set per decision"),
            prompt_tokens: live.prompt_tokens,
            cached_tokens: live.cached_tokens,
            prefill_time,
            readout_time,
        }));
    }
}
