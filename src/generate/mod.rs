//! Generating an answer: prefill the prompt, then sample token by token until an
//! end-of-sequence token, the token budget, the context limit, or the caller says stop.
//! [`generate_with`] picks the loop (single.rs, with or without a constraint, or
//! speculative.rs); [`generate_text`] adds the text side (answer.rs's `TextSide`): streaming
//! complete characters and ending at stop strings.

use crate::constrain::Guide;
use crate::model::{Logits, Model, State};
use crate::sampler::Sampler;
use crate::speculate::{SpecStats, Speculator};
use crate::tokenizer::TextTokenizer;
use crate::Error;
use answer::TextSide;

pub(crate) mod answer;
mod single;
mod speculative;
mod stop;

pub use stop::{first_stop, StopStrings};

use serde::Serialize;
use std::time::Duration;

pub use crate::model::{common_prefix, PREFILL_CHUNK};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-sequence token, or the text reached a stop string.
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
    /// Answer tokens a constraint forced (appended without sampling; counted in `tokens`).
    pub forced_tokens: usize,
    /// What speculation proposed and kept, when it ran.
    pub speculation: Option<SpecStats>,
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Generation {
    pub fn prefill_tok_per_s(&self) -> f64 {
        self.prefill_tokens as f64 / self.prefill_time.as_secs_f64().max(1e-9)
    }

    /// Decode speed over the tokens after the first (the first comes from the prefill logits);
    /// `None` for an answer of one token or none, where no decode step ran (a speed of 0 would
    /// read as a broken decoder).
    pub fn decode_tok_per_s(&self) -> Option<f64> {
        let decoded = self.tokens.len().checked_sub(1).filter(|&n| n > 0)?;
        Some(decoded as f64 / self.decode_time.as_secs_f64().max(1e-9))
    }
}

/// What the caller wants after each token.
pub enum Control {
    Continue,
    Stop,
}

/// One answer in progress: its tokens so far and the limits that end it. Every generation
/// loop (one answer, a batch, a chat turn) takes each sampled token through
/// [`Sequence::accept`], so they all end an answer for the same reasons in the same order.
pub struct Sequence<'a> {
    pub tokens: Vec<u32>,
    stop_ids: &'a [u32],
    max_tokens: usize,
}

impl<'a> Sequence<'a> {
    pub fn new(stop_ids: &'a [u32], max_tokens: usize) -> Sequence<'a> {
        Sequence {
            tokens: Vec::new(),
            stop_ids,
            max_tokens,
        }
    }

    /// Takes a sampled `token` and says whether the answer ends, checking in order: an
    /// end-of-sequence id (not kept), the caller's check `on_token` (run on the kept token:
    /// sampler penalties, streaming, stop strings), the token budget, and `free_positions`
    /// (what the KV cache still holds).
    pub fn accept(
        &mut self,
        token: u32,
        free_positions: usize,
        on_token: impl FnOnce(u32) -> Control,
    ) -> Option<FinishReason> {
        if self.stop_ids.contains(&token) {
            return Some(FinishReason::Stop);
        }
        self.tokens.push(token);
        if let Control::Stop = on_token(token) {
            return Some(FinishReason::Interrupted);
        }
        if self.tokens.len() >= self.max_tokens {
            return Some(FinishReason::Length);
        }
        if free_positions == 0 {
            return Some(FinishReason::Context);
        }
        None
    }

    /// [`accept`](Self::accept) for the token-level loops: a kept token joins the sampler's
    /// penalty window, then the caller sees it.
    pub(crate) fn take(
        &mut self,
        token: u32,
        free_positions: usize,
        sampler: &mut Sampler,
        on_token: &mut impl FnMut(u32) -> Control,
    ) -> Option<FinishReason> {
        self.accept(token, free_positions, |t| {
            sampler.accept(t);
            on_token(t)
        })
    }
}

/// Runs `prompt` (all of it is new: the caller truncates the cache to the shared prefix first)
/// and generates up to `max_tokens`, calling `on_token` for each new token. Every prompt and
/// generated token is [`accept`](Sampler::accept)ed by the sampler for its penalty window.
pub fn generate(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop_ids: &[u32],
    max_tokens: usize,
    on_token: impl FnMut(u32) -> Control,
) -> Result<Generation, Error> {
    generate_with(
        model,
        state,
        prompt,
        sampler,
        stop_ids,
        max_tokens,
        Assist::default(),
        on_token,
    )
}

/// What shapes decoding besides the sampler. Both are optional; they do not combine yet (a
/// constraint with speculation is refused).
#[derive(Default)]
pub struct Assist<'a, 'm> {
    /// Each token is sampled from those the guide allows; tokens it forces are appended
    /// without sampling.
    pub guide: Option<&'a mut Guide>,
    /// Tokens are proposed and verified several per pass; the answer is the same.
    pub speculate: Option<&'a mut Speculator<'m>>,
    /// The token ids already in the cache before the prompt (speculation looks them up, and a
    /// draft model catches up on them). Needed only with `speculate`.
    pub context: &'a [u32],
}

impl<'a, 'm> Assist<'a, 'm> {
    pub fn guided(guide: Option<&'a mut Guide>) -> Assist<'a, 'm> {
        Assist {
            guide,
            ..Assist::default()
        }
    }
}

/// [`generate`] under a constraint: each token is sampled from those `guide` allows, and
/// tokens it forces are appended without sampling. Without a guide this is [`generate`].
#[allow(clippy::too_many_arguments)]
pub fn generate_guided(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop_ids: &[u32],
    max_tokens: usize,
    guide: Option<&mut Guide>,
    on_token: impl FnMut(u32) -> Control,
) -> Result<Generation, Error> {
    generate_with(
        model,
        state,
        prompt,
        sampler,
        stop_ids,
        max_tokens,
        Assist::guided(guide),
        on_token,
    )
}

/// [`generate`] with a constraint or speculation ([`Assist`]).
#[allow(clippy::too_many_arguments)]
pub fn generate_with(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop_ids: &[u32],
    max_tokens: usize,
    assist: Assist,
    on_token: impl FnMut(u32) -> Control,
) -> Result<Generation, Error> {
    let capacity = state.cache.capacity();
    check_room(prompt, capacity.saturating_sub(state.cache.len()), capacity)?;
    match (assist.guide, assist.speculate) {
        (Some(_), Some(_)) => Err(Error::Invalid(
            "speculative decoding does not combine with a constraint yet".into(),
        )),
        (None, Some(spec)) => speculative::run(
            model,
            state,
            assist.context,
            prompt,
            sampler,
            stop_ids,
            max_tokens,
            spec,
            on_token,
        ),
        (guide, None) => single::run(
            model, state, prompt, sampler, stop_ids, max_tokens, guide, on_token,
        ),
    }
}

/// The prompt is not empty and fits the `room` positions a cache of `capacity` has for it:
/// the one check every loop (single, batched, the server's) makes before a prefill.
pub(crate) fn check_room(prompt: &[u32], room: usize, capacity: usize) -> Result<(), Error> {
    if prompt.is_empty() {
        return Err(Error::Invalid("the prompt has no tokens".into()));
    }
    if prompt.len() > room {
        return Err(Error::Invalid(format!(
            "the prompt needs {} positions but only {room} of {capacity} are free",
            prompt.len(),
        )));
    }
    Ok(())
}

/// Runs a prompt in chunks of [`PREFILL_CHUNK`] (every token accepted by the sampler for its
/// penalty window) and samples the first answer token.
pub(crate) fn prefill(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
) -> Result<u32, Error> {
    prompt.iter().for_each(|&id| sampler.accept(id));
    prefill_sampled(model, state, prompt, 0, sampler)
}

/// How many of a prompt's first `shared` tokens, already in a cache, a run can keep and still
/// give bit for bit what a fresh [`prefill`] gives. At least the last prompt token always runs
/// (its logits give the first answer token). A fresh prefill runs [`PREFILL_CHUNK`]s from
/// position 0, so whole chunks can always be kept; when the model's rows do not depend on how
/// a run is cut ([`Model::prompt_cuts_exact`]), any position can, as long as the rest of its
/// chunk runs as one pass of two tokens or more (a one-token pass takes the mat-vec kernels,
/// which round differently). Few-shot prompts then run only what follows their shared
/// examples, not also the examples' last partial chunk.
pub fn resume_point(model: &Model, prompt_len: usize, shared: usize) -> usize {
    let n = shared.min(prompt_len.saturating_sub(1));
    let whole = n / PREFILL_CHUNK * PREFILL_CHUNK;
    if n == whole || !model.prompt_cuts_exact() {
        return whole;
    }
    // The fresh run's chunk holding position n ends at `end` (> n, so end - 2 >= whole).
    let end = (whole + PREFILL_CHUNK).min(prompt_len);
    n.min(end - 2)
}

/// [`prefill`] for a state whose cache already holds the prompt's first `held` positions (a
/// prompt sharing its start with an earlier one), `held` a [`resume_point`]: the passes after
/// it end where a run from position 0 ends its chunks, so the answer is bit for bit the one
/// [`prefill`] gives.
pub(crate) fn prefill_after(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    held: usize,
    sampler: &mut Sampler,
) -> Result<u32, Error> {
    if resume_point(model, prompt.len(), held) != held
        || held >= prompt.len()
        || state.cache.len() != held
    {
        return Err(Error::Invalid(format!(
            "prefill after {held} held positions of a {}-token prompt (cache {})",
            prompt.len(),
            state.cache.len()
        )));
    }
    prompt.iter().for_each(|&id| sampler.accept(id));
    prefill_sampled(model, state, prompt, held, sampler)
}

/// [`prefill`] for a prompt the sampler has already [`accept`](Sampler::accept)ed, from
/// the prompt's position `from` on (0, or what [`prefill_after`] checked), in passes that end
/// where [`PREFILL_CHUNK`]s counted from the prompt's start end; the cache may hold earlier
/// turns before the prompt.
fn prefill_sampled(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    from: usize,
    sampler: &mut Sampler,
) -> Result<u32, Error> {
    let mut next = 0;
    let mut at = from;
    while at < prompt.len() {
        let end = ((at / PREFILL_CHUNK + 1) * PREFILL_CHUNK).min(prompt.len());
        let chunk = &prompt[at..end];
        at = end;
        let last = end >= prompt.len();
        let logits =
            model.forward_batch(state, chunk, if last { Logits::Last } else { Logits::None })?;
        if let Some(f) = state.on_prefill.as_mut() {
            f(end, prompt.len());
        }
        if last {
            next = sampler.sample(&logits);
        }
    }
    Ok(next)
}

/// When an answer ends, besides a full context or the caller saying stop.
pub struct StopAt<'a> {
    /// End-of-sequence token ids (not part of the answer).
    pub ids: &'a [u32],
    /// Texts that end the answer as soon as it contains one; they are not part of the answer.
    pub strings: &'a [String],
    pub max_tokens: usize,
}

/// A finished answer: the tokens and timings, and the text.
#[derive(Debug)]
pub struct TextGeneration {
    pub generation: Generation,
    /// The tokens decoded without special tokens, cut before the first stop string.
    pub text: String,
    /// False when a limit or the caller cut the answer before its constraint was complete
    /// (always true without one).
    pub complete: bool,
}

/// [`generate`] with text: `on_text` is called at every generated token with the text it
/// completes — whole UTF-8 characters, never part of a stop string, possibly empty while a
/// character or a possible stop string is incomplete. Returning [`Control::Stop`] from it ends
/// the answer as [`FinishReason::Interrupted`]; reaching a stop string ends it as
/// [`FinishReason::Stop`].
pub fn generate_text(
    model: &Model,
    tokenizer: &TextTokenizer,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop: &StopAt,
    on_text: impl FnMut(&str) -> Control,
) -> Result<TextGeneration, Error> {
    generate_text_with(
        model,
        tokenizer,
        state,
        prompt,
        sampler,
        stop,
        Assist::default(),
        on_text,
    )
}

/// [`generate_text`] under a constraint ([`generate_guided`]). The constraint decides where
/// the answer ends, so stop strings are not applied: one inside a JSON string would cut
/// a valid answer into an invalid one.
#[allow(clippy::too_many_arguments)]
pub fn generate_text_guided(
    model: &Model,
    tokenizer: &TextTokenizer,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop: &StopAt,
    guide: Option<&mut Guide>,
    on_text: impl FnMut(&str) -> Control,
) -> Result<TextGeneration, Error> {
    generate_text_with(
        model,
        tokenizer,
        state,
        prompt,
        sampler,
        stop,
        Assist::guided(guide),
        on_text,
    )
}

/// [`generate_text`] with a constraint or speculation ([`Assist`]).
#[allow(clippy::too_many_arguments)]
pub fn generate_text_with(
    model: &Model,
    tokenizer: &TextTokenizer,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    stop: &StopAt,
    assist: Assist,
    mut on_text: impl FnMut(&str) -> Control,
) -> Result<TextGeneration, Error> {
    let Assist {
        mut guide,
        speculate,
        context,
    } = assist;
    let strings: &[String] = if guide.is_some() { &[] } else { stop.strings };
    let mut text = TextSide::new(tokenizer, StopStrings::new(strings));
    let assist = Assist {
        guide: guide.as_deref_mut(),
        speculate,
        context,
    };
    let mut generation = generate_with(
        model,
        state,
        prompt,
        sampler,
        stop.ids,
        stop.max_tokens,
        assist,
        |id| {
            let shown = text.push(id);
            // Called even with no text, so a caller's stop check runs at every token.
            let control = on_text(&shown);
            match text.stopped() {
                true => Control::Stop,
                false => control,
            }
        },
    )?;
    let (tail, text) = text.end(&generation.tokens, &mut generation.finish_reason);
    if !tail.is_empty() {
        on_text(&tail);
    }
    Ok(TextGeneration {
        generation,
        text,
        complete: answer::completed(guide),
    })
}

/// The text of an answer as kept: its tokens decoded without special tokens, cut before the
/// first stop string when one ended it, and without an incomplete last character (an answer
/// cut by a limit may end inside one; the stream never showed it). Every generation loop
/// (single and batched) ends its text here.
pub(crate) fn answer_text(
    tokenizer: &TextTokenizer,
    tokens: &[u32],
    stops: &[String],
    stopped_on_string: bool,
) -> String {
    let mut full = tokenizer.decode(tokens, true);
    full.truncate(crate::tokenizer::trim_incomplete_char(&full).len());
    match first_stop(&full, stops) {
        Some(at) if stopped_on_string => full[..at].to_string(),
        _ => full,
    }
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
