//! The engine thread's loop. Each pass: take new jobs, drop those whose client left, give
//! free slots to waiting jobs (longest cached prefix first), run up to one prompt chunk's
//! worth of multi-token runs (prompts, and a constraint's forced tokens), then one decode
//! step over every answer that waits on a single token.

mod deciding;

use super::logprobs::{forced, logprob_of, TokenLogprob};
use super::prompt_cache::PromptCache;
use super::{add, Capacity, Event, Failure, Finished, Job, Msg, Shared, BATCH_BUCKETS};
use crate::generate::answer::{Answer, Next, Taken};
use crate::generate::{common_prefix, FinishReason, PREFILL_CHUNK};
use crate::loader::LoadedModel;
use crate::model::{Logits, State};
use crate::sampler::Sampler;
use crate::Error;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::Instant;
use toktrie::SimpleVob;

/// Decode rows per forward pass: [`Model::step_each`](crate::model::Model::step_each) reads
/// each weight row once for up to 16.
const STEP_ROWS: usize = 16;

struct Slot<'m> {
    state: State,
    /// The adapters `state.cache` was computed with ([`crate::lora::AdapterSet::key`]).
    lora_key: String,
    /// The token ids in `state.cache`, position by position.
    cached: Vec<u32>,
    /// When the slot last finished a job (least recently used goes first on ties).
    used: u64,
    live: Option<Live<'m>>,
}

/// A job in a slot.
struct Live<'m> {
    /// Admission order (prompt chunks are taken first come, first served).
    order: u64,
    dec: Answer<'m>,
    /// Tokens to run before the next sample, and how many of them have run.
    todo: Vec<u32>,
    ran: usize,
    /// The next sample is under the guide's mask.
    masked: bool,
    logprobs: Option<usize>,
    bias: Vec<(u32, f32)>,
    sink: Box<dyn super::Sink>,
    prompt_tokens: usize,
    cached_tokens: usize,
    admitted: Instant,
    /// When the first answer token was sampled (the prompt's end; a decision's prefix end).
    first: Option<Instant>,
    /// A decision job: read once its shared tokens have run.
    decision: Option<super::Decision>,
}

impl Live<'_> {
    fn remaining(&self) -> usize {
        self.todo.len() - self.ran
    }
}

pub(super) fn run(m: &LoadedModel, rx: Receiver<Msg>, shared: &Shared, cap: Capacity) {
    let mut slots: Vec<Slot> = (0..cap.slots)
        .map(|_| Slot {
            state: m.model.new_state(cap.context),
            lora_key: m.model.lora.as_ref().map(|l| l.key()).unwrap_or_default(),
            cached: Vec::new(),
            used: 0,
            live: None,
        })
        .collect();
    let mut waiting: VecDeque<(Box<Job>, Instant)> = VecDeque::new();
    let mut stopping = false;
    let mut cancel_all = false;
    let mut order = 0u64;
    let mut tick = 0u64;
    let mut kept = PromptCache::new(cap.prompt_cache);
    loop {
        tick += 1;
        let idle = waiting.is_empty() && slots.iter().all(|s| s.live.is_none());
        if idle {
            publish(shared, &slots, &kept);
            if stopping {
                // A job that raced the shutdown into the channel still gets its answer.
                while let Ok(msg) = rx.try_recv() {
                    if let Msg::Job(mut job, _) = msg {
                        end_job(shared, false, |s| &s.failed);
                        job.sink.send(Event::Failed(Failure::ShuttingDown));
                    }
                }
                return;
            }
            match rx.recv() {
                Ok(msg) => take(msg, &mut waiting, &mut stopping, &mut cancel_all),
                Err(_) => return,
            }
        }
        while let Ok(msg) = rx.try_recv() {
            take(msg, &mut waiting, &mut stopping, &mut cancel_all);
        }
        if stopping {
            for (mut job, _) in waiting.drain(..) {
                end_job(shared, false, |s| &s.failed);
                job.sink.send(Event::Failed(Failure::ShuttingDown));
            }
        }
        waiting.retain(|(job, _)| {
            let gone = job.sink.is_closed();
            if gone {
                end_job(shared, false, |s| &s.cancelled);
            }
            !gone
        });
        for slot in &mut slots {
            let Some(live) = slot.live.as_mut() else {
                continue;
            };
            if cancel_all {
                end_job(shared, true, |s| &s.failed);
                live.sink.send(Event::Failed(Failure::ShuttingDown));
            } else if live.sink.is_closed() {
                end_job(shared, true, |s| &s.cancelled);
            } else {
                continue;
            }
            slot.live = None;
            slot.used = tick;
        }
        admit(m, shared, &mut slots, &mut kept, &mut waiting, &mut order);
        let t = Instant::now();
        deciding::run_prompts(m, shared, &mut slots, &mut kept, tick);
        run_prompts(m, shared, &mut slots, &mut kept, tick);
        deciding::run_decisions(m, shared, &mut slots, tick);
        let u = Instant::now();
        run_steps(m, shared, &mut slots, tick);
        add(&shared.stats.prefill_us, (u - t).as_micros() as u64);
        add(&shared.stats.decode_us, u.elapsed().as_micros() as u64);
        publish(shared, &slots, &kept);
        let delay = shared.step_delay_us.load(Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
    }
}

fn take(
    msg: Msg,
    waiting: &mut VecDeque<(Box<Job>, Instant)>,
    stopping: &mut bool,
    cancel_all: &mut bool,
) {
    match msg {
        Msg::Job(job, at) => waiting.push_back((job, at)),
        Msg::Stop { cancel } => {
            *stopping = true;
            *cancel_all |= cancel;
        }
    }
}

/// A job ended (finished, failed or dropped): it leaves the engine's count, and its slot
/// when it had one. Counted before its last event is sent, so a client that reads the
/// figures after its answer sees its own job in them.
fn end_job(
    shared: &Shared,
    in_slot: bool,
    counter: impl Fn(&super::Stats) -> &std::sync::atomic::AtomicU64,
) {
    add(counter(&shared.stats), 1);
    if in_slot {
        shared.stats.active.fetch_sub(1, Ordering::SeqCst);
    }
    shared.in_engine.fetch_sub(1, Ordering::SeqCst);
}

/// The gauge the counters do not keep: the slots' KV cache bytes.
fn publish(shared: &Shared, slots: &[Slot], kept: &PromptCache) {
    let st = &shared.stats;
    st.prompt_cache_entries.store(kept.len(), Ordering::Relaxed);
    st.prompt_cache_bytes.store(kept.bytes(), Ordering::Relaxed);
    let kv: usize = slots.iter().map(|s| s.state.cache.bytes()).sum();
    shared.stats.kv_bytes.store(kv, Ordering::Relaxed);
}

/// Gives free slots to waiting jobs in order: each takes the free slot whose cache shares the
/// longest prefix with its prompt (ties: the one idle longest) and keeps that prefix, or, when
/// the prompt cache holds a longer one, the free slot with the least to lose and the cache's
/// copy; then it is set to run the rest of its prompt.
fn admit<'m>(
    m: &'m LoadedModel,
    shared: &Shared,
    slots: &mut [Slot<'m>],
    kept: &mut PromptCache,
    waiting: &mut VecDeque<(Box<Job>, Instant)>,
    order: &mut u64,
) {
    while slots.iter().any(|s| s.live.is_none()) {
        let Some((mut job, queued_at)) = waiting.pop_front() else {
            return;
        };
        let capacity = slots[0].state.cache.capacity();
        let decision = job.decision.take();
        let p = match &decision {
            Some(d) => d.plan.prefix().to_vec(),
            None => std::mem::take(&mut job.prompt),
        };
        if (p.is_empty() && decision.is_none()) || p.len() > capacity {
            end_job(shared, false, |s| &s.failed);
            job.sink.send(Event::Failed(Failure::Engine(format!(
                "the prompt has {} tokens; a slot holds 1 to {capacity}",
                p.len()
            ))));
            continue;
        }
        // An answer runs at least one token for its first logits; a decision's own tokens
        // come after its shared ones.
        let keep_at_most = match decision {
            Some(_) => p.len(),
            None => p.len() - 1,
        };
        let key = job.lora.as_ref().map(|l| l.key()).unwrap_or_default();
        let free: Vec<(usize, usize)> = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.live.is_none())
            .map(|(i, s)| match s.lora_key == key {
                true => (i, common_prefix(&s.cached, &p).min(keep_at_most)),
                false => (i, 0),
            })
            .collect();
        let (i, own) = *free
            .iter()
            .max_by_key(|&&(i, n)| (n, std::cmp::Reverse(slots[i].used)))
            .expect("a free slot");
        let from_cache = kept.find(&p, keep_at_most, &key).filter(|f| f.len > own);
        let (i, reused) = match from_cache {
            Some(found) => {
                let (j, _) = *free
                    .iter()
                    .min_by_key(|&&(j, n)| (n, slots[j].used))
                    .expect("a free slot");
                let slot = &mut slots[j];
                if kept.restore(&found, &mut slot.state.cache) {
                    slot.cached.clear();
                    slot.cached.extend_from_slice(&p[..found.len]);
                    add(&shared.stats.prompt_cache_hits, 1);
                    (j, found.len)
                } else {
                    (i, own)
                }
            }
            None => (i, own),
        };
        let slot = &mut slots[i];
        let reused = slot.state.cache.truncate(reused);
        slot.cached.truncate(reused);
        slot.state.lora = job.lora.clone();
        slot.lora_key = key;
        let job = *job;
        let dec = Answer::new(
            &m.tokenizer,
            &m.stop_ids,
            job.stop,
            job.max_tokens,
            Sampler::new(job.sampler),
            job.guide,
            &p[..reused],
            &p[reused..],
        );
        let st = &shared.stats;
        st.active.fetch_add(1, Ordering::SeqCst);
        add(&st.admitted, 1);
        add(&st.prompt_tokens, p.len() as u64);
        add(&st.cached_tokens, reused as u64);
        if reused > 0 {
            add(&st.jobs_with_reuse, 1);
        }
        let mut sink = job.sink;
        sink.send(Event::Started {
            cached: reused,
            queued: queued_at.elapsed(),
        });
        *order += 1;
        slot.live = Some(Live {
            order: *order,
            masked: dec.prompt_masked(),
            dec,
            todo: p[reused..].to_vec(),
            ran: 0,
            logprobs: job.logprobs,
            bias: job.logit_bias,
            sink,
            prompt_tokens: p.len(),
            cached_tokens: reused,
            admitted: Instant::now(),
            first: None,
            decision,
        });
    }
}

/// Multi-token runs (prompts, forced tokens), oldest job first, each prompt kept in the prompt
/// cache once it has run, in chunks of
/// [`PREFILL_CHUNK`] counted from the run's start (as a single stream's prefill splits it),
/// until one chunk's worth of tokens ran. A run's last chunk of one token is left to the
/// decode step (a one-row pass is a step either way).
fn run_prompts(
    m: &LoadedModel,
    shared: &Shared,
    slots: &mut [Slot],
    kept: &mut PromptCache,
    tick: u64,
) {
    let mut budget = PREFILL_CHUNK;
    while budget > 0 {
        let next = slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.live.as_ref().map(|l| (i, l)))
            .filter(|(_, l)| l.remaining() >= 2 || (l.decision.is_some() && l.remaining() >= 1))
            .min_by_key(|(_, l)| l.order)
            .map(|(i, _)| i);
        let Some(i) = next else {
            return;
        };
        let slot = &mut slots[i];
        let live = slot.live.as_mut().expect("chosen live");
        let end = (live.ran + PREFILL_CHUNK).min(live.todo.len());
        let chunk = live.todo[live.ran..end].to_vec();
        let last = end == live.todo.len();
        budget = budget.saturating_sub(chunk.len());
        let want_mask = last && live.masked;
        let deciding = live.decision.is_some();
        let state = &mut slot.state;
        let dec = &mut live.dec;
        let (logits, mask) = std::thread::scope(|s| {
            let mask = want_mask.then(|| s.spawn(|| dec.mask()));
            let want = if last && !deciding {
                Logits::Last
            } else {
                Logits::None
            };
            let logits = m.model.forward_batch(state, &chunk, want);
            (logits, mask.map(join_mask))
        });
        add(&shared.stats.prefill_chunks, 1);
        match logits {
            Ok(mut logits) => {
                slot.cached.extend_from_slice(&chunk);
                live.ran = end;
                if last && live.first.is_none() {
                    // A whole prompt's keys and values: kept for requests that start alike.
                    kept.insert(&slot.cached, &slot.state.cache, &slot.lora_key);
                }
                if last && deciding {
                    live.first = Some(Instant::now());
                } else if last {
                    after_logits(shared, slot, &mut logits, mask, tick);
                }
            }
            Err(e) => fail(shared, slot, e, tick),
        }
    }
}

/// One decode step: every answer waiting on a single token, in passes of up to [`STEP_ROWS`]
/// rows, with the masks of constrained rows computed on another thread meanwhile.
fn run_steps(m: &LoadedModel, shared: &Shared, slots: &mut [Slot], tick: u64) {
    let rows: Vec<usize> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.live
                .as_ref()
                .is_some_and(|l| l.remaining() == 1 && l.decision.is_none())
        })
        .map(|(i, _)| i)
        .collect();
    for group in rows.chunks(STEP_ROWS) {
        let tokens: Vec<u32> = group
            .iter()
            .map(|&i| {
                let l = slots[i].live.as_ref().expect("row");
                l.todo[l.ran]
            })
            .collect();
        let mut states: Vec<&mut State> = Vec::with_capacity(group.len());
        let mut masked: Vec<&mut Answer> = Vec::new();
        let mut mask_rows: Vec<usize> = Vec::new();
        for (r, slot) in slots
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| group.contains(i))
            .map(|(_, s)| s)
            .enumerate()
        {
            let live = slot.live.as_mut().expect("row");
            if live.masked {
                masked.push(&mut live.dec);
                mask_rows.push(r);
            }
            states.push(&mut slot.state);
        }
        let (logits, masks) = std::thread::scope(|s| {
            let masks = (!masked.is_empty())
                .then(|| s.spawn(move || masked.into_iter().map(|d| d.mask()).collect::<Vec<_>>()));
            let logits = m.model.step_each(&mut states, &tokens);
            let masks = masks.map(|h| match h.join() {
                Ok(m) => m,
                Err(panic) => std::panic::resume_unwind(panic),
            });
            (logits, masks)
        });
        let st = &shared.stats;
        add(&st.decode_steps, 1);
        add(&st.decode_rows, group.len() as u64);
        let bucket = BATCH_BUCKETS
            .iter()
            .position(|&b| group.len() <= b)
            .unwrap_or(BATCH_BUCKETS.len());
        add(&st.batch_sizes[bucket], 1);
        let mut masks: Vec<Option<Result<SimpleVob, Error>>> = {
            let mut all: Vec<Option<Result<SimpleVob, Error>>> =
                (0..group.len()).map(|_| None).collect();
            for (r, m) in mask_rows.iter().zip(masks.into_iter().flatten()) {
                all[*r] = Some(m);
            }
            all
        };
        match logits {
            Ok(mut logits) => {
                // Rows are sampled in parallel (a sample over the whole vocabulary is a sort),
                // then taken in order.
                let vocab = m.model.spec.vocab_size;
                let mut lives: Vec<&mut Live> = slots
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| group.contains(i))
                    .map(|(_, s)| s.live.as_mut().expect("row"))
                    .collect();
                let picked: Vec<_> = lives
                    .par_iter_mut()
                    .zip(logits.par_chunks_mut(vocab))
                    .zip(masks.par_iter_mut())
                    .map(|((live, row), mask)| pick(live, row, mask.take()))
                    .collect();
                for ((r, &i), picked) in group.iter().enumerate().zip(picked) {
                    let slot = &mut slots[i];
                    slot.cached.push(tokens[r]);
                    slot.live.as_mut().expect("row").ran += 1;
                    take_token(shared, slot, picked, tick);
                }
            }
            Err(e) => {
                for &i in group {
                    fail(shared, &mut slots[i], Error::Invalid(e.to_string()), tick);
                }
            }
        }
    }
}

fn join_mask(
    h: std::thread::ScopedJoinHandle<'_, Result<SimpleVob, Error>>,
) -> Result<SimpleVob, Error> {
    match h.join() {
        Ok(m) => m,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The next token from a run's last `logits` (the request's logit bias added, under the mask
/// when the run was masked), with its log-probabilities when asked for.
fn pick(
    live: &mut Live,
    logits: &mut [f32],
    mask: Option<Result<SimpleVob, Error>>,
) -> Result<(u32, Option<TokenLogprob>), Error> {
    for &(id, b) in &live.bias {
        if let Some(l) = logits.get_mut(id as usize) {
            *l += b;
        }
    }
    let mask = mask.transpose()?;
    let next = live.dec.sample(logits, mask.as_ref())?;
    Ok((next, live.logprobs.map(|k| logprob_of(logits, next, k))))
}

/// The slot's run has ended on `logits`: pick the next token and take it.
fn after_logits(
    shared: &Shared,
    slot: &mut Slot,
    logits: &mut [f32],
    mask: Option<Result<SimpleVob, Error>>,
    tick: u64,
) {
    let live = slot.live.as_mut().expect("live");
    let picked = pick(live, logits, mask);
    take_token(shared, slot, picked, tick);
}

/// Takes a picked token into the answer and sets up the next run, or finishes the answer.
fn take_token(
    shared: &Shared,
    slot: &mut Slot,
    picked: Result<(u32, Option<TokenLogprob>), Error>,
    tick: u64,
) {
    let (next, chosen) = match picked {
        Ok(p) => p,
        Err(e) => return fail(shared, slot, e, tick),
    };
    let live = slot.live.as_mut().expect("live");
    live.first.get_or_insert_with(Instant::now);
    let mut chosen = chosen;
    let free = slot.state.cache.capacity() - slot.state.cache.len();
    let (sink, top) = (&mut live.sink, live.logprobs);
    let mut taken = 0u64;
    let step = live.dec.advance(next, free, |t: Taken| {
        taken += 1;
        let logprob = match t.forced {
            true => top.map(|k| forced(t.id, k)),
            false => chosen.take(),
        };
        sink.send(Event::Token {
            id: t.id,
            text: t.text,
            logprob,
        });
    });
    add(&shared.stats.generated_tokens, taken);
    match step {
        Ok(Next::Run { forced, masked }) => {
            live.todo.clear();
            live.todo.push(next);
            live.todo.extend_from_slice(&forced);
            live.ran = 0;
            live.masked = masked;
        }
        Ok(Next::Done(reason)) => finish(shared, slot, reason, tick),
        Err(e) => fail(shared, slot, e, tick),
    }
}

fn finish(shared: &Shared, slot: &mut Slot, reason: FinishReason, tick: u64) {
    let mut live = slot.live.take().expect("live");
    slot.used = tick;
    let end = live.dec.finish(reason);
    let first = live.first.unwrap_or_else(Instant::now);
    end_job(shared, true, |s| &s.finished);
    live.sink.send(Event::Done(Finished {
        reason: end.reason,
        text: end.text,
        tail: end.tail,
        tokens: std::mem::take(&mut live.dec.seq.tokens),
        prompt_tokens: live.prompt_tokens,
        cached_tokens: live.cached_tokens,
        complete: end.complete,
        forced_tokens: live.dec.forced_tokens,
        prefill_time: first.duration_since(live.admitted),
        decode_time: first.elapsed(),
    }));
}

/// The job fails with `e`; what its run left in the cache is forgotten.
fn fail(shared: &Shared, slot: &mut Slot, e: Error, tick: u64) {
    if let Some(mut live) = slot.live.take() {
        end_job(shared, true, |s| &s.failed);
        live.sink
            .send(Event::Failed(Failure::Engine(e.to_string())));
    }
    slot.state.cache.clear();
    slot.cached.clear();
    slot.used = tick;
}
