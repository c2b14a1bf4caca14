//! Serving many requests from one model: continuous batching on an engine thread.
//!
//! A server's handlers [`submit`](Engine::submit) [`Job`]s (prompt ids, sampling, stop rules, an
//! optional constraint) and read [`Event`]s back through each job's [`Sink`]. The engine thread
//! keeps `slots` decoding states; a job takes a free slot at the next step and leaves it when
//! its answer ends, and every decode step runs one token of each active answer as one batch.
//!
//! - **Answers do not depend on the load.** Decode rows go through [`Model::step_each`], each
//!   row bit for bit a one-token step, and prompts run in the same chunks as a single stream's
//!   prefill, so an answer is token for token what `pocket run` gives for the same prompt and
//!   settings, however many requests share its steps (tests/engine/serving.rs).
//! - **Prefix reuse by slot affinity.** A slot's KV cache outlives its request; a new request
//!   takes the free slot whose cache shares the longest prefix with its prompt (a chat that
//!   resends its conversation finds its own slot) and runs only the rest.
//! - **A prompt cache** (`prompt_cache`) keeps each prompt's keys and values within a byte
//!   budget after its slot moves on; a request starting with a kept prompt copies them in
//!   when no free slot holds as long a prefix (another client's same question, a
//!   conversation whose slot was taken meanwhile).
//! - **Bounded.** At most `slots + queue` jobs are in the engine; more are refused at
//!   [`submit`](Engine::submit) (a server's 429). The KV memory is `slots` caches of `context`
//!   positions.
//! - **Prompts do not stall decoding.** A step runs at most one prompt chunk's worth of prompt
//!   tokens ([`PREFILL_CHUNK`]) beside the decode batch, so a long prompt delays the other
//!   answers by one chunk per step instead of its whole prefill.
//! - **Gone clients free their slot** at the next step ([`Sink::is_closed`]).
//!
//! [`Model::step_each`]: crate::model::Model::step_each
//! [`PREFILL_CHUNK`]: crate::generate::PREFILL_CHUNK

pub mod logprobs;
mod prompt_cache;
mod worker;

use crate::constrain::Guide;
use crate::generate::FinishReason;
use crate::loader::LoadedModel;
use crate::sampler::SamplerConfig;
pub use logprobs::TokenLogprob;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The engine's size.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    /// Answers decoded at once (each with its own KV cache).
    pub slots: usize,
    /// Positions each slot's cache holds (prompt and answer).
    pub context: usize,
    /// Jobs that may wait for a slot; more are refused.
    pub queue: usize,
    /// Bytes of prompts' keys and values kept beyond their slots for later requests that
    /// start the same way (`prompt_cache`; 0: none).
    pub prompt_cache: usize,
}

/// One request for an answer.
pub struct Job {
    /// The prompt's token ids (chat template applied); not empty, at most `context` long.
    pub prompt: Vec<u32>,
    pub sampler: SamplerConfig,
    /// Added to these tokens' logits before sampling (OpenAI's `logit_bias`).
    pub logit_bias: Vec<(u32, f32)>,
    /// Texts that end the answer (ignored under a guide, as in `pocket run`).
    pub stop: Vec<String>,
    pub max_tokens: usize,
    /// A compiled constraint (schema, grammar, tool calls), if any.
    pub guide: Option<Guide>,
    /// Report each token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    /// A decision instead of an answer (then `prompt` is empty and the sampling fields are
    /// unused).
    pub decision: Option<Decision>,
    /// The LoRA adapters the job runs with (none: the base). Jobs with different adapters share
    /// decode steps; a cached prefix is reused only under the same adapters.
    pub lora: Option<Arc<crate::lora::AdapterSet>>,
    pub sink: Box<dyn Sink>,
}

/// A System One decision in the engine: the plan's shared tokens run as a prompt (reusing a
/// slot's or the prompt cache's prefix like any prompt), then its questions are read in one
/// pass together with every other decision ready at that step, and the scores come back as
/// [`Event::Decided`]. No token is generated.
pub struct Decision {
    pub plan: crate::decide::Plan,
    pub head: Option<Arc<crate::decide::Head>>,
}

/// A decision's scores, and where its time went.
#[derive(Debug)]
pub struct Decided {
    pub scores: crate::decide::Scores,
    pub prompt_tokens: usize,
    /// Shared tokens taken from a cache instead of being run.
    pub cached_tokens: usize,
    /// From admission to the readout's start (the shared tokens' prefill).
    pub prefill_time: Duration,
    pub readout_time: Duration,
}

/// Where a job's events go. Called on the engine thread: `send` must not block.
pub trait Sink: Send {
    fn send(&mut self, event: Event);
    /// The receiver is gone (a client disconnected): the job is dropped at the next step.
    fn is_closed(&self) -> bool;
}

#[derive(Debug)]
pub enum Event {
    /// The job took a slot; `cached` prompt tokens were already in its cache.
    Started {
        cached: usize,
        queued: Duration,
    },
    /// A token joined the answer, with the text it completed (possibly empty: part of a
    /// character, or text that may be the start of a stop string).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done(Finished),
    /// A decision job's scores (its last event).
    Decided(Decided),
    Failed(Failure),
}

#[derive(Debug, PartialEq)]
pub enum Failure {
    /// The server is stopping: the job was waiting, or the shutdown deadline passed.
    ShuttingDown,
    /// The engine could not run it (the message says why).
    Engine(String),
}

/// A finished answer.
#[derive(Debug)]
pub struct Finished {
    pub reason: FinishReason,
    /// The answer's text as `pocket run` keeps it (cut before a stop string).
    pub text: String,
    /// Text held back while streaming and released at the end (after the last token's).
    pub tail: String,
    pub tokens: Vec<u32>,
    pub prompt_tokens: usize,
    /// Prompt tokens taken from the slot's cache instead of being run.
    pub cached_tokens: usize,
    /// False when the answer was cut before its constraint was complete.
    pub complete: bool,
    pub forced_tokens: usize,
    pub prefill_time: Duration,
    pub decode_time: Duration,
}

/// Why [`Engine::submit`] refused a job (it is handed back).
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// Every slot is busy and the queue is full.
    Busy {
        waiting: usize,
    },
    ShuttingDown,
}

/// Counters since start, and the current gauges.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub slots: usize,
    pub context: usize,
    pub queue_capacity: usize,
    pub active: usize,
    pub waiting: usize,
    pub kv_bytes: usize,
    /// Bytes the slots' caches hold when every one is full: the KV memory budget.
    pub kv_budget_bytes: usize,
    pub admitted: u64,
    pub finished: u64,
    /// Jobs dropped because their client went away.
    pub cancelled: u64,
    pub failed: u64,
    pub refused: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens found in a slot's cache (prefix reuse).
    pub cached_tokens: u64,
    pub jobs_with_reuse: u64,
    /// Of those, the jobs whose prefix came from the prompt cache rather than their slot.
    pub prompt_cache_hits: u64,
    /// The prompt cache's entries and their bytes now, and its budget.
    pub prompt_cache_entries: usize,
    pub prompt_cache_bytes: usize,
    pub prompt_cache_budget: usize,
    pub generated_tokens: u64,
    /// Decision jobs answered, and the readout passes that answered them.
    pub decisions: u64,
    pub decision_passes: u64,
    pub decode_steps: u64,
    /// Rows over all decode steps (÷ steps: the mean batch).
    pub decode_rows: u64,
    /// Decode steps by batch size: ≤1, ≤2, ≤4, ≤8, ≤16, ≤32, more.
    pub batch_sizes: [u64; 7],
    pub prefill_chunks: u64,
    /// Time the engine spent running prompt chunks, and decode steps (sampling included).
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// Upper bounds of [`Snapshot::batch_sizes`]' buckets (the last is open).
pub const BATCH_BUCKETS: [usize; 6] = [1, 2, 4, 8, 16, 32];

#[derive(Default)]
struct Stats {
    active: AtomicUsize,
    kv_bytes: AtomicUsize,
    admitted: AtomicU64,
    finished: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    jobs_with_reuse: AtomicU64,
    prompt_cache_hits: AtomicU64,
    prompt_cache_entries: AtomicUsize,
    prompt_cache_bytes: AtomicUsize,
    generated_tokens: AtomicU64,
    decisions: AtomicU64,
    decision_passes: AtomicU64,
    decode_steps: AtomicU64,
    decode_rows: AtomicU64,
    batch_sizes: [AtomicU64; 7],
    prefill_chunks: AtomicU64,
    prefill_us: AtomicU64,
    decode_us: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

struct Shared {
    stats: Stats,
    /// A pause after every decode step, in microseconds (0: none): lets tests hold answers
    /// open long enough to disconnect or stop in the middle of them on a tiny model.
    step_delay_us: AtomicU64,
    /// Jobs submitted and not yet ended (waiting or in a slot).
    in_engine: AtomicUsize,
    stopping: AtomicBool,
}

enum Msg {
    Job(Box<Job>, Instant),
    Stop { cancel: bool },
}

/// The engine thread and the way in.
pub struct Engine {
    tx: Mutex<mpsc::Sender<Msg>>,
    kv_budget: usize,
    shared: Arc<Shared>,
    capacity: Capacity,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Engine {
    /// Starts the engine thread over `model` with `capacity.slots` caches of
    /// `capacity.context` positions (allocated as they fill).
    pub fn start(model: Arc<LoadedModel>, capacity: Capacity) -> Result<Engine, crate::Error> {
        if capacity.slots == 0 || capacity.context < 2 {
            return Err(crate::Error::Invalid(format!(
                "serving needs at least one slot and a context of 2 positions (slots {}, context {})",
                capacity.slots, capacity.context
            )));
        }
        let model_kv = model
            .model
            .kv_bytes(capacity.context, model.model.config.kv);
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            stats: Stats::default(),
            in_engine: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            step_delay_us: AtomicU64::new(0),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("pocket-engine".into())
            .spawn(move || worker::run(&model, rx, &s, capacity))
            .map_err(|e| crate::Error::Invalid(format!("starting the engine thread: {e}")))?;
        Ok(Engine {
            kv_budget: capacity.slots * model_kv,
            tx: Mutex::new(tx),
            shared,
            capacity,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Sleeps this long after every decode step (for tests of slow answers; 0 by default).
    pub fn set_step_delay(&self, d: Duration) {
        self.shared
            .step_delay_us
            .store(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Queues `job`; it starts at the next step that finds a free slot. Refused (and handed
    /// back) when `slots + queue` jobs are already in the engine, or it is stopping.
    pub fn submit(&self, job: Job) -> Result<(), (Refused, Box<Job>)> {
        let job = Box::new(job);
        if self.shared.stopping.load(Ordering::SeqCst) {
            return Err((Refused::ShuttingDown, job));
        }
        let limit = self.capacity.slots + self.capacity.queue;
        let taken = self
            .shared
            .in_engine
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            });
        if let Err(n) = taken {
            add(&self.shared.stats.refused, 1);
            let waiting = n.saturating_sub(self.capacity.slots);
            return Err((Refused::Busy { waiting }, job));
        }
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(mpsc::SendError(Msg::Job(job, _))) = tx.send(Msg::Job(job, Instant::now())) {
            self.shared.in_engine.fetch_sub(1, Ordering::SeqCst);
            return Err((Refused::ShuttingDown, job));
        }
        Ok(())
    }

    /// Stops taking jobs: waiting ones fail with [`Failure::ShuttingDown`]; running ones
    /// finish, or fail the same way when `cancel_running`. Call again with `cancel_running`
    /// once a deadline passes.
    pub fn shutdown(&self, cancel_running: bool) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let _ = tx.send(Msg::Stop {
            cancel: cancel_running,
        });
    }

    /// The engine thread is running (false once it stopped, or if it died).
    pub fn alive(&self) -> bool {
        self.worker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|h| !h.is_finished())
    }

    /// Jobs in the engine (running or waiting).
    pub fn in_flight(&self) -> usize {
        self.shared.in_engine.load(Ordering::SeqCst)
    }

    /// Waits for the engine thread to end (after [`shutdown`](Self::shutdown), once its jobs
    /// have ended).
    pub fn join(&self) {
        let handle = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = &self.shared.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let active = s.active.load(Ordering::SeqCst);
        Snapshot {
            slots: self.capacity.slots,
            context: self.capacity.context,
            queue_capacity: self.capacity.queue,
            active,
            waiting: self.in_flight().saturating_sub(active),
            kv_bytes: s.kv_bytes.load(Ordering::Relaxed),
            kv_budget_bytes: self.kv_budget,
            admitted: get(&s.admitted),
            finished: get(&s.finished),
            cancelled: get(&s.cancelled),
            failed: get(&s.failed),
            refused: get(&s.refused),
            prompt_tokens: get(&s.prompt_tokens),
            cached_tokens: get(&s.cached_tokens),
            jobs_with_reuse: get(&s.jobs_with_reuse),
            prompt_cache_hits: get(&s.prompt_cache_hits),
            prompt_cache_entries: s.prompt_cache_entries.load(Ordering::Relaxed),
            prompt_cache_bytes: s.prompt_cache_bytes.load(Ordering::Relaxed),
            prompt_cache_budget: self.capacity.prompt_cache,
            generated_tokens: get(&s.generated_tokens),
            decisions: get(&s.decisions),
            decision_passes: get(&s.decision_passes),
            decode_steps: get(&s.decode_steps),
            decode_rows: get(&s.decode_rows),
            batch_sizes: std::array::from_fn(|i| get(&s.batch_sizes[i])),
            prefill_chunks: get(&s.prefill_chunks),
            prefill_seconds: get(&s.prefill_us) as f64 / 1e6,
            decode_seconds: get(&s.decode_us) as f64 / 1e6,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown(true);
        self.join();
    }
}
