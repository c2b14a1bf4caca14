//! Speculative decoding: several tokens proposed cheaply, checked by the model in one pass
//! ([`Model::verify`]), and kept as far as the model itself would have written them.
//!
//! Decoding reads every weight once per token, so it runs at the memory's speed; a pass over a
//! few rows reads them once too and costs little more than one row. Where the answer copies its
//! prompt (extraction, rewriting, code edits) most proposals hold and the answer comes several
//! tokens per pass.
//!
//! The output is the output of plain decoding, token for token and for any sampler settings:
//! - [`Model::verify`] gives each row the bits a one-row step gives it;
//! - each row is sampled, in order, by the same [`Sampler`] plain decoding uses (its penalty
//!   window and seeded draws advance exactly as they would), and a proposal is kept only when
//!   that sample equals it. The first sample that differs is the next token, as it would be.
//!
//! So with temperature the distribution is the target's by construction (each token *is* the
//! target's sample). A draft model samples its proposals with a copy of the same sampler, the
//! same draws: when draft and target agree on the distribution they mostly agree on the token,
//! which is what standard speculative sampling's acceptance rule buys, without giving up
//! seed-for-seed identity.
//!
//! - `lookup.rs`: proposals from n-grams of the context (prompt-lookup decoding);
//! - `draft.rs`: proposals from a smaller model with the same vocabulary;
//! - `policy.rs`: how many to propose, from the measured acceptance and cost of a pass.

mod draft;
mod lookup;
mod policy;

pub use draft::check_draft;
use draft::Draft;
use lookup::Lookup;
pub use policy::Policy;

use crate::model::Model;
use crate::sampler::Sampler;
use crate::Error;
use serde::Serialize;

/// Most rows one verification pass takes: the next token and up to 15 proposals (the batched
/// kernels' decode route, see `Matrix::matmul_group_as_matvec`).
pub const MAX_ROWS: usize = 16;

/// What a generation did with speculation (`--json`'s `speculation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SpecStats {
    /// Tokens proposed.
    pub proposed: usize,
    /// Proposed tokens the model kept.
    pub accepted: usize,
    /// Forward passes of the model while decoding (one per answer token without speculation).
    pub passes: usize,
}

impl SpecStats {
    pub fn add(&mut self, o: &SpecStats) {
        self.proposed += o.proposed;
        self.accepted += o.accepted;
        self.passes += o.passes;
    }

    /// Kept proposals over proposed ones (0 when none were proposed).
    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.proposed.max(1) as f64
    }
}

/// Where proposals come from.
pub enum Proposer<'m> {
    Lookup(Lookup),
    Draft(Box<Draft<'m>>),
}

/// One answer's (or one conversation's) speculation: the proposer and its adaptive policy.
/// Kept across turns, so what it learned about acceptance carries over.
pub struct Speculator<'m> {
    proposer: Proposer<'m>,
    policy: Policy,
}

impl<'m> Speculator<'m> {
    /// Prompt lookup: proposals continue the latest earlier occurrence of the context's last
    /// n-gram (1 to `max_ngram` tokens, longest first).
    pub fn lookup(max_ngram: usize) -> Speculator<'m> {
        Speculator {
            proposer: Proposer::Lookup(Lookup::new(max_ngram)),
            policy: Policy::new(None),
        }
    }

    /// Proposals sampled by `draft` (checked first with [`check_draft`]) for `target`; the
    /// draft's own KV cache of up to `context` positions follows the target's. Until its steps
    /// are timed, a draft step is taken to cost what its weights weigh against the target's (a
    /// Q4 draft of a Q8 model: about 0.55 of a step, which never pays, so it never runs).
    pub fn draft(target: &Model, draft: &'m Model, context: usize) -> Speculator<'m> {
        let ratio = draft.step_bytes() as f64 / target.step_bytes().max(1) as f64;
        Speculator {
            proposer: Proposer::Draft(Box::new(Draft::new(draft, context))),
            policy: Policy::new(Some(ratio)),
        }
    }

    /// A fixed number of proposals per pass instead of the adaptive policy (benchmarks that
    /// map the cost curve; 0 turns proposing off).
    pub fn fixed(mut self, draft_tokens: usize) -> Speculator<'m> {
        self.policy = self.policy.fixed(draft_tokens.min(MAX_ROWS - 1));
        self
    }

    pub fn name(&self) -> &'static str {
        match self.proposer {
            Proposer::Lookup(_) => "lookup",
            Proposer::Draft(_) => "draft",
        }
    }

    /// Up to `room` tokens that may follow `ctx` (every token so far, the last one not yet
    /// run by the target), sampled for a draft with a copy of `sampler`.
    pub(crate) fn propose(
        &mut self,
        ctx: &[u32],
        room: usize,
        sampler: &Sampler,
    ) -> Result<Vec<u32>, Error> {
        let room = room.min(MAX_ROWS - 1);
        if room == 0 {
            return Ok(Vec::new());
        }
        match &mut self.proposer {
            Proposer::Lookup(l) => Ok(l.propose(ctx, room, &self.policy)),
            Proposer::Draft(d) => {
                let k = self.policy.draft_len(policy::Source::Model, room);
                if k == 0 {
                    return Ok(Vec::new());
                }
                d.propose(ctx, k, sampler, &mut self.policy)
            }
        }
    }

    /// How a pass went: `proposed` tokens of which `accepted` were kept, in `elapsed`.
    pub(crate) fn observe(
        &mut self,
        proposed: usize,
        accepted: usize,
        elapsed: std::time::Duration,
    ) {
        let source = match &self.proposer {
            Proposer::Lookup(l) => l.last_source(),
            Proposer::Draft(_) => policy::Source::Model,
        };
        self.policy.observe(source, proposed, accepted, elapsed);
    }
}
