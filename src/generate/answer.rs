//! One answer in progress as a state machine: what happens to each sampled token, in one
//! place. [`Answer::advance`] does, in order, the sequence limits, the sampler's window, the
//! streamed text, stop strings and the guide's consume / watch / forced tokens, and returns
//! the tokens to run next; [`Answer::finish`] ends the text. The server's scheduler and the
//! batched eval loop drive it. The single-stream loops (generate/single.rs, with or without a
//! guide, and generate/speculative.rs) are built from its parts: [`guide_step`] for the turn,
//! [`Sequence::accept`] for the limits, [`TextSide`] for the text (`generate_text_with`), and
//! [`completed`] for the constraint's verdict, so each rule is written once.
//! tests/engine/serving.rs holds the server's answers to `generate_text_with`'s, token for
//! token.

use super::{answer_text, Control, FinishReason, Sequence, StopStrings};
use crate::constrain::Guide;
use crate::sampler::Sampler;
use crate::tokenizer::{TextStream, TextTokenizer};
use crate::Error;
use toktrie::SimpleVob;

/// What an answer needs after a token was taken.
#[derive(Debug, PartialEq)]
pub(crate) enum Next {
    /// Run the token just taken, then `forced` (tokens the constraint appended; empty, with
    /// no allocation, without one), then sample from the last one's logits, under the
    /// guide's mask when `masked`.
    Run { forced: Vec<u32>, masked: bool },
    /// The answer ended.
    Done(FinishReason),
}

/// A token that became part of the answer, with the text it completed (possibly empty).
pub(crate) struct Taken {
    pub id: u32,
    pub text: String,
    /// Appended by the constraint without sampling.
    pub forced: bool,
}

/// The finished answer's text, as `generate_text_with` leaves it.
pub(crate) struct Ending {
    pub reason: FinishReason,
    pub text: String,
    /// Held-back text released at the end (after the last [`Taken`]).
    pub tail: String,
    /// False when a constraint was cut before it completed.
    pub complete: bool,
}

pub(crate) struct Answer<'m> {
    pub seq: Sequence<'m>,
    pub sampler: Sampler,
    pub guide: Option<Guide>,
    text: TextSide<'m, 'static>,
    pub forced_tokens: usize,
}

impl<'m> Answer<'m> {
    /// An answer to a prompt whose first `history.len()` tokens are already in the cache (the
    /// sampler's penalty window starts with them, as a chat turn's does). Stop strings do not
    /// apply under a guide: the constraint decides where the answer ends.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tokenizer: &'m TextTokenizer,
        stop_ids: &'m [u32],
        stop: Vec<String>,
        max_tokens: usize,
        mut sampler: Sampler,
        guide: Option<Guide>,
        history: &[u32],
        new_prompt: &[u32],
    ) -> Answer<'m> {
        sampler.set_history(history);
        new_prompt.iter().for_each(|&id| sampler.accept(id));
        let stop = if guide.is_some() { Vec::new() } else { stop };
        Answer {
            seq: Sequence::new(stop_ids, max_tokens.max(1)),
            sampler,
            guide,
            text: TextSide::new(tokenizer, StopStrings::owned(stop)),
            forced_tokens: 0,
        }
    }

    /// Whether the prompt's last logits are sampled under the mask (a guide that is on from
    /// the start).
    pub fn prompt_masked(&self) -> bool {
        self.guide.as_ref().is_some_and(Guide::active)
    }

    /// Samples the next token from `logits`, under `mask` when the run was masked.
    pub fn sample(&mut self, logits: &[f32], mask: Option<&SimpleVob>) -> Result<u32, Error> {
        match mask {
            None => Ok(self.sampler.sample(logits)),
            Some(mask) => self
                .sampler
                .sample_allowed(logits, mask.as_slice())
                .ok_or_else(|| {
                    Error::Invalid(
                        "the constraint allows no token of this vocabulary here (a grammar \
                         that needs text the tokenizer cannot write?)"
                            .into(),
                    )
                }),
        }
    }

    /// The mask for the next sample (after the tokens of the last [`Next::Run`] were
    /// consumed); computed while the forward pass runs.
    pub fn mask(&mut self) -> Result<SimpleVob, Error> {
        match self.guide.as_mut() {
            Some(g) => g.mask(),
            None => Err(Error::Invalid("mask: the answer has no constraint".into())),
        }
    }

    /// Takes the sampled token `next` with `free` positions left in the cache, and says what
    /// runs next. Every token that joins the answer is shown to `take` in order.
    pub fn advance(
        &mut self,
        next: u32,
        free: usize,
        mut take: impl FnMut(Taken),
    ) -> Result<Next, Error> {
        let Answer {
            seq,
            sampler,
            guide,
            text,
            forced_tokens,
        } = self;
        guide_step(
            guide.as_mut(),
            next,
            free,
            forced_tokens,
            |token, room, forced| {
                let end = seq.accept(token, room, |t| {
                    sampler.accept(t);
                    take(Taken {
                        id: t,
                        text: text.push(t),
                        forced,
                    });
                    match text.stopped() {
                        true => Control::Stop,
                        false => Control::Continue,
                    }
                });
                // Only a stop string interrupts here, and it ends the answer as a stop.
                match end {
                    Some(FinishReason::Interrupted) => Some(FinishReason::Stop),
                    e => e,
                }
            },
        )
    }

    /// The answer's end, as `generate_text_with` finishes it: held-back text released, a
    /// stop string's cut applied, the constraint's completeness judged.
    pub fn finish(&mut self, mut reason: FinishReason) -> Ending {
        let (tail, text) = self.text.end(&self.seq.tokens, &mut reason);
        Ending {
            reason,
            text,
            tail,
            complete: completed(self.guide.as_mut()),
        }
    }
}

/// Whether an answer's constraint, if it has one, was complete when the answer ended: false
/// when a limit or the caller cut it while it still needed text.
pub(crate) fn completed(guide: Option<&mut Guide>) -> bool {
    guide.is_none_or(|g| !g.active() || g.accepting())
}

/// The text side of an answer: each token's piece streamed as whole characters, held back
/// while it could begin a stop string; at the end, the held-back tail and the answer's text
/// as kept. The server's [`Answer`] and `generate_text_with` both end their text here.
pub(crate) struct TextSide<'t, 's> {
    stream: TextStream<'t>,
    scan: StopStrings<'s>,
    tokenizer: &'t TextTokenizer,
}

impl<'t, 's> TextSide<'t, 's> {
    pub fn new(tokenizer: &'t TextTokenizer, scan: StopStrings<'s>) -> TextSide<'t, 's> {
        TextSide {
            stream: TextStream::new(tokenizer),
            scan,
            tokenizer,
        }
    }

    /// Takes a kept token and returns the text that may be shown now (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.stream.push(id).unwrap_or_default();
        self.scan.push(&piece)
    }

    /// True once a stop string was reached.
    pub fn stopped(&self) -> bool {
        self.scan.stopped()
    }

    /// Ends the text of the answer whose kept tokens are `tokens`: returns the held-back tail
    /// still to show and the whole text as kept, and makes `reason` a stop when a stop string
    /// ended the answer (possibly one completed by the tail).
    pub fn end(&mut self, tokens: &[u32], reason: &mut FinishReason) -> (String, String) {
        let tail = release_tail(&mut self.stream, &mut self.scan);
        if self.scan.stopped() {
            *reason = FinishReason::Stop;
        }
        let text = answer_text(
            self.tokenizer,
            tokens,
            self.scan.stops(),
            self.scan.stopped(),
        );
        (tail, text)
    }
}

/// What one turn of a generation loop does with a sampled token `next` when `free` positions
/// are left: `accept(token, free, forced)` takes each token that joins the answer (the
/// sampled one, then any the guide forces) and says whether that ends it; the guide consumes
/// or watches them. Returns what runs next (the token and any forced ones), masked when the
/// guide is active. Without a guide: the token, unmasked, or the end. Every loop under a constraint runs this one
/// function, so they end an answer and force tokens alike.
pub(crate) fn guide_step(
    guide: Option<&mut Guide>,
    next: u32,
    free: usize,
    forced_tokens: &mut usize,
    mut accept: impl FnMut(u32, usize, bool) -> Option<FinishReason>,
) -> Result<Next, Error> {
    let end = accept(next, free, false);
    let Some(guide) = guide else {
        return Ok(match end {
            Some(reason) => Next::Done(reason),
            None => Next::Run {
                forced: Vec::new(),
                masked: false,
            },
        });
    };
    if let Some(reason) = end {
        // A limit or the caller ended the answer on a kept token: the guide still takes it,
        // so whether the text is complete is judged on all of it.
        if reason != FinishReason::Stop {
            if guide.active() {
                let _ = guide.consume(&[next]);
            } else {
                guide.watch(next);
            }
        }
        return Ok(Next::Done(reason));
    }
    if guide.active() {
        guide.consume(&[next])?;
        if guide.stopped() {
            return Ok(Next::Done(FinishReason::Stop));
        }
    } else {
        guide.watch(next);
        if !guide.active() {
            return Ok(Next::Run {
                forced: Vec::new(),
                masked: false,
            });
        }
    }
    let mut forced = Vec::new();
    let mut end = None;
    for f in guide.forced() {
        let room = free.saturating_sub(1 + forced.len());
        end = accept(f, room, true);
        if end != Some(FinishReason::Stop) {
            forced.push(f);
            *forced_tokens += 1;
        }
        if end.is_some() {
            break;
        }
    }
    guide.consume(&forced)?;
    if let Some(reason) = end {
        return Ok(Next::Done(reason));
    }
    if guide.stopped() {
        return Ok(Next::Done(FinishReason::Stop));
    }
    Ok(Next::Run {
        forced,
        masked: true,
    })
}

/// The text an answer's stream still holds back when it ends (an incomplete character or a
/// possible stop string's beginning), as far as no stop string cuts it; empty when one
/// already ended the answer. Every loop that streams text ends it here.
pub(crate) fn release_tail(stream: &mut TextStream, scan: &mut StopStrings) -> String {
    let mut tail = String::new();
    if !scan.stopped() {
        let rest = stream.finish().unwrap_or_default();
        tail = scan.push(&rest);
        if !scan.stopped() {
            tail.push_str(&scan.finish());
        }
    }
    tail
}
