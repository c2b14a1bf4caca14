//! Draft-model proposals: a smaller (or lower-precision) build of a model with the same
//! vocabulary samples the next few tokens, and the target verifies them.
//!
//! The draft keeps its own KV cache in step with the target's by token ids: before each
//! proposal it drops whatever of its cache no longer matches the target's tokens (a rejected
//! proposal, an edited conversation) and runs the tokens it has not seen (the prompt once, then
//! the last pass's bonus token), so its cache always holds a prefix of the target's context.
//! Both models run on the one worker pool, one after the other.

use super::policy::Policy;
use crate::loader::LoadedModel;
use crate::model::{common_prefix, PREFILL_CHUNK};
use crate::model::{Logits, Model, State};
use crate::sampler::Sampler;
use crate::Error;
use std::time::Instant;

pub struct Draft<'m> {
    model: &'m Model,
    state: State,
    /// The token ids in the draft's cache, position by position.
    cached: Vec<u32>,
}

impl<'m> Draft<'m> {
    pub fn new(model: &'m Model, context: usize) -> Draft<'m> {
        Draft {
            model,
            state: model.new_state(context),
            cached: Vec::new(),
        }
    }

    /// `k` tokens after `ctx`, each sampled from the draft's logits by a copy of the target's
    /// `sampler` (the same penalty window and the same draws the target will use).
    pub fn propose(
        &mut self,
        ctx: &[u32],
        k: usize,
        sampler: &Sampler,
        policy: &mut Policy,
    ) -> Result<Vec<u32>, Error> {
        let room = self.state.cache.capacity();
        if ctx.len() + k > room {
            return Ok(Vec::new());
        }
        // Catch up: keep the shared prefix, run the rest (at least the last token, for logits).
        let shared = common_prefix(&self.cached, ctx).min(ctx.len() - 1);
        let kept = self.state.cache.truncate(shared);
        self.cached.truncate(kept);
        // What the draft costs per proposed token: its steps, and catching up on the last
        // pass's bonus token (a prompt's catch-up is a one-off prefill, left out).
        let start = (ctx.len() - kept <= 2).then(Instant::now);
        let mut logits = Vec::new();
        for chunk in ctx[kept..].chunks(PREFILL_CHUNK) {
            logits = self
                .model
                .forward_batch(&mut self.state, chunk, Logits::Last)?;
            self.cached.extend_from_slice(chunk);
        }
        let start = start.unwrap_or_else(Instant::now);
        let mut s = sampler.clone();
        let mut out = Vec::with_capacity(k);
        loop {
            let t = s.sample(&logits);
            s.accept(t);
            out.push(t);
            if out.len() == k {
                policy.observe_draft(start.elapsed(), k);
                return Ok(out);
            }
            let l = self
                .model
                .step(&mut self.state, t, true)?
                .expect("logits were requested");
            logits.clear();
            logits.extend_from_slice(l);
            self.cached.push(t);
        }
    }
}

/// Refuses a draft that cannot propose for `target`: its tokenizer must spell every id as the
/// target's does (the same vocabulary, special tokens included) and its head must cover the
/// same ids, or its proposals would mean other text.
pub fn check_draft(target: &LoadedModel, draft: &LoadedModel) -> Result<(), Error> {
    let name = |m: &LoadedModel| m.path.display().to_string();
    let (tv, dv) = (target.tokenizer.vocab_size(), draft.tokenizer.vocab_size());
    if tv != dv {
        return Err(Error::Invalid(format!(
            "the draft {} has a tokenizer of {dv} ids but the model {} has {tv}: a draft must \
             share the model's tokenizer",
            name(draft),
            name(target)
        )));
    }
    for id in 0..tv as u32 {
        let (a, b) = (
            target.tokenizer.id_to_token(id),
            draft.tokenizer.id_to_token(id),
        );
        if a != b {
            return Err(Error::Invalid(format!(
                "the draft {} spells token {id} as {:?} but the model {} spells it {:?}: a \
                 draft must share the model's tokenizer",
                name(draft),
                b.unwrap_or_default(),
                name(target),
                a.unwrap_or_default()
            )));
        }
    }
    let (ts, ds) = (target.model.spec.vocab_size, draft.model.spec.vocab_size);
    if ts != ds {
        return Err(Error::Invalid(format!(
            "the draft {} scores {ds} token ids but the model {} scores {ts}",
            name(draft),
            name(target)
        )));
    }
    Ok(())
}
