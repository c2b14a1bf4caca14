//! One answer in progress as a state machine: what happens to each sampled token, in one
//! place. [`Answer::advance`] does, in order, the sequence limits, the sampler's window, the
//! streamed text, stop strings and the guide's consume / watch / forced tokens, and returns
//! the tokens to run next; [`Answer::finish`] ends the text. The server's scheduler and the
//! batched eval loop drive it; the single-stream guided loop shares its guide step
//! ([`guide_step`]). tests/engine/serving.rs holds its answers to `generate_text_with`'s,
//! token for token.

use super::{answer_text, Control, FinishReason, Sequence, StopStrings};
use crate::constrain::Guide;
use crate::sampler::Sampler;
use crate::tokenizer::{TextStream, TextTokenizer};
use crate::Error;
use toktrie::SimpleVob;

/// What an answer needs after a token was taken.
#[derive(Debug, PartialEq)]
pub(crate) enum Next {
    /// Run these tokens (the first is the token just taken; any others were forced by the
    /// constraint), then sample from the last one's logits, under the guide's mask when
    /// `masked`.
    Run { tokens: Vec<u32>, masked: bool },
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
    stream: TextStream<'m>,
    scan: StopStrings<'static>,
    tokenizer: &'m TextTokenizer,
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
            stream: TextStream::new(tokenizer),
            scan: StopStrings::owned(stop),
            tokenizer,
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
            stream,
            scan,
            forced_tokens,
            ..
        } = self;
        guide_step(
            guide.as_mut(),
            next,
            free,
            forced_tokens,
            |token, room, forced| {
                accept_text(seq, sampler, stream, scan, token, room, forced, &mut take)
            },
        )
    }

    /// The answer's end, as `generate_text_with` finishes it: held-back text released, a
    /// stop string's cut applied, the constraint's completeness judged.
    pub fn finish(&mut self, mut reason: FinishReason) -> Ending {
        let tail = release_tail(&mut self.stream, &mut self.scan);
        if self.scan.stopped() {
            reason = FinishReason::Stop;
        }
        let text = answer_text(
            self.tokenizer,
            &self.seq.tokens,
            self.scan.stops(),
            self.scan.stopped(),
        );
        let complete = self
            .guide
            .as_mut()
            .is_none_or(|g| !g.active() || g.accepting());
        Ending {
            reason,
            text,
            tail,
            complete,
        }
    }
}

/// [`Sequence::accept`] with the text side of `generate_text_with`: the sampler's window, the
/// streamed piece, stop strings (which end the answer as a stop).
#[allow(clippy::too_many_arguments)]
fn accept_text(
    seq: &mut Sequence,
    sampler: &mut Sampler,
    stream: &mut TextStream,
    scan: &mut StopStrings,
    token: u32,
    free: usize,
    forced: bool,
    take: &mut impl FnMut(Taken),
) -> Option<FinishReason> {
    let end = seq.accept(token, free, |t| {
        sampler.accept(t);
        let piece = stream.push(t).unwrap_or_default();
        take(Taken {
            id: t,
            text: scan.push(&piece),
            forced,
        });
        match scan.stopped() {
            true => Control::Stop,
            false => Control::Continue,
        }
    });
    match end {
        Some(FinishReason::Interrupted) => Some(FinishReason::Stop),
        e => e,
    }
}

/// What one turn of a generation loop does with a sampled token `next` when `free` positions
/// are left: `accept(token, free, forced)` takes each token that joins the answer (the
/// sampled one, then any the guide forces) and says whether that ends it; the guide consumes
/// or watches them. Returns the tokens to run next, masked when the guide is active. Without
/// a guide: the token, unmasked, or the end. Every loop under a constraint runs this one
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
                tokens: vec![next],
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
                tokens: vec![next],
                masked: false,
            });
        }
    }
    let mut batch = vec![next];
    let mut end = None;
    for f in guide.forced() {
        let room = free.saturating_sub(batch.len());
        end = accept(f, room, true);
        if end != Some(FinishReason::Stop) {
            batch.push(f);
            *forced_tokens += 1;
        }
        if end.is_some() {
            break;
        }
    }
    guide.consume(&batch[1..])?;
    if let Some(reason) = end {
        return Ok(Next::Done(reason));
    }
    if guide.stopped() {
        return Ok(Next::Done(FinishReason::Stop));
    }
    Ok(Next::Run {
        tokens: batch,
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
