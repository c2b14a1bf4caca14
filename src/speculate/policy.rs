//! How many tokens to propose: the most that pay, given what a proposal of this kind has been
//! worth so far and what a pass over more rows costs on this machine.
//!
//! A pass over `1 + k` rows costs `1 + c·k` one-row steps (`c` measured as decoding goes: the
//! batched kernels read the weights once but their arithmetic grows with the rows); a draft
//! model adds `d·k` (its steps, measured too). If each proposed token holds with probability
//! `α` once the ones before it held, the pass yields `1 + α + … + α^k` tokens on average. The
//! policy proposes the `k` that maximizes yield over cost, and nothing when no `k` beats a
//! plain step: free text, where n-grams rarely continue, so decodes at plain speed.

use std::time::Duration;

/// What a proposal came from; each has its own acceptance estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A context n-gram of this many tokens (4 or more count as 4).
    Gram(usize),
    /// A copy going on: the match continues right where the last proposal, all of it kept,
    /// was taken from. Copies come in long runs, so this holds far more often than a fresh
    /// match.
    Streak,
    /// A draft model.
    Model,
}

impl Source {
    fn index(self) -> usize {
        match self {
            Source::Gram(n) => n.clamp(1, 4) - 1,
            Source::Streak => 4,
            Source::Model => 5,
        }
    }
}

/// Prior acceptance per source (n-grams of 1, 2, 3, 4+ tokens; a streak; a draft model), worth
/// [`PRIOR_WEIGHT`] passes: short n-grams in free text mostly fail; a draft is meant to be a
/// close build of the model (its own Q4 build keeps about 0.8–0.9 of its proposals).
const PRIOR: [f64; 6] = [0.2, 0.35, 0.5, 0.6, 0.8, 0.8];
const PRIOR_WEIGHT: f64 = 2.0;
/// A source's evidence decays by this much each time it is tried, so the estimate follows the
/// text's kind...
const DECAY: f64 = 0.9;
/// ...and by this much every pass, so a source given up on is tried again after a while (its
/// estimate drifts back to the prior): a chat that turns from free text to copying is noticed.
const FORGET: f64 = 0.99;
/// A proposal must promise at least this much over a plain step.
const MARGIN: f64 = 1.05;
/// The cost of an extra row (in one-row steps) until measured.
const ROW_COST_PRIOR: f64 = 0.3;

#[derive(Clone, Debug)]
pub struct Policy {
    /// Per source: decayed counts of kept proposals and of passes that rejected one.
    kept: [f64; 6],
    rejected: [f64; 6],
    /// Seconds of a one-row pass, of an extra verified row and of a draft step (smoothed).
    step: Option<f64>,
    row: Option<f64>,
    draft_step: Option<f64>,
    /// A draft step's cost in target steps until one is timed.
    draft_prior: f64,
    /// A fixed proposal length (benchmarks), instead of the estimate.
    fixed: Option<usize>,
}

impl Policy {
    /// `draft_cost`: a draft model's step in target steps, before any is timed (`None`: no
    /// draft model).
    pub fn new(draft_cost: Option<f64>) -> Policy {
        Policy {
            kept: [0.0; 6],
            rejected: [0.0; 6],
            step: None,
            row: None,
            draft_step: None,
            draft_prior: draft_cost.unwrap_or(0.0),
            fixed: None,
        }
    }

    pub fn fixed(mut self, k: usize) -> Policy {
        self.fixed = Some(k);
        self
    }

    /// The estimated chance that a proposed token from `source` holds, given the ones before.
    pub fn alpha(&self, source: Source) -> f64 {
        let i = source.index();
        let a = self.kept[i] + PRIOR[i] * PRIOR_WEIGHT;
        let r = self.rejected[i] + (1.0 - PRIOR[i]) * PRIOR_WEIGHT;
        a / (a + r)
    }

    /// The cost of one more verified row and of one draft step, in one-row steps.
    fn costs(&self) -> (f64, f64) {
        let Some(step) = self.step else {
            return (ROW_COST_PRIOR, self.draft_prior);
        };
        let row = self.row.map_or(ROW_COST_PRIOR, |r| (r / step).max(0.01));
        (row, self.draft_step.map_or(self.draft_prior, |d| d / step))
    }

    /// How many of up to `room` tokens from `source` to propose (0: step plainly).
    pub fn draft_len(&self, source: Source, room: usize) -> usize {
        if let Some(k) = self.fixed {
            return k.min(room);
        }
        // Until a plain step has been timed, take one: the costs are relative to it.
        if self.step.is_none() {
            return 0;
        }
        let alpha = self.alpha(source);
        let (row, draft) = if source == Source::Model {
            self.costs()
        } else {
            (self.costs().0, 0.0)
        };
        let (mut best, mut best_k) = (MARGIN, 0);
        let (mut yield_, mut a) = (1.0, 1.0);
        for k in 1..=room {
            a *= alpha;
            yield_ += a;
            let gain = yield_ / (1.0 + (row + draft) * k as f64);
            if gain > best {
                (best, best_k) = (gain, k);
            }
        }
        best_k
    }

    /// A verification pass: `proposed` tokens from `source`, `accepted` kept, in `elapsed`
    /// (the target's pass alone).
    pub fn observe(&mut self, source: Source, proposed: usize, accepted: usize, elapsed: Duration) {
        let t = elapsed.as_secs_f64();
        self.kept.iter_mut().for_each(|k| *k *= FORGET);
        self.rejected.iter_mut().for_each(|r| *r *= FORGET);
        if proposed == 0 {
            self.step = Some(smooth(self.step, t));
            return;
        }
        if let Some(step) = self.step {
            let per_row = ((t - step) / proposed as f64).max(0.0);
            self.row = Some(smooth(self.row, per_row));
        }
        let i = source.index();
        self.kept[i] = self.kept[i] * DECAY + accepted as f64;
        self.rejected[i] *= DECAY;
        if accepted < proposed {
            self.rejected[i] += 1.0;
        }
    }

    /// A draft model proposed `k` tokens in `elapsed` (catching up on the tokens it had not
    /// seen included).
    pub fn observe_draft(&mut self, elapsed: Duration, k: usize) {
        let per = elapsed.as_secs_f64() / k.max(1) as f64;
        self.draft_step = Some(smooth(self.draft_step, per));
    }
}

/// An exponentially weighted mean that starts at its first value.
fn smooth(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| 0.8 * o + 0.2 * new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(step_ms: f64) -> Policy {
        let mut p = Policy::new(None);
        p.observe(
            Source::Gram(3),
            0,
            0,
            Duration::from_secs_f64(step_ms / 1e3),
        );
        p
    }

    /// Proposals that keep failing stop being made; ones that keep holding grow long.
    #[test]
    fn proposal_length_follows_acceptance_and_cost() {
        let mut p = timed(10.0);
        assert_eq!(
            Policy::new(None).draft_len(Source::Gram(3), 15),
            0,
            "untimed"
        );
        for _ in 0..20 {
            p.observe(Source::Gram(1), 2, 0, Duration::from_millis(14));
        }
        assert_eq!(p.draft_len(Source::Gram(1), 15), 0);
        for _ in 0..20 {
            p.observe(Source::Gram(3), 8, 8, Duration::from_millis(12));
        }
        // α ≈ 1 at 0.025 steps per extra row: long proposals pay.
        let k = p.draft_len(Source::Gram(3), 15);
        assert!(k >= 8, "{k}");
        // The same acceptance at a full step per row never pays.
        let mut dear = timed(10.0);
        for _ in 0..20 {
            dear.observe(Source::Gram(3), 4, 4, Duration::from_millis(50));
        }
        assert_eq!(dear.draft_len(Source::Gram(3), 15), 0);
        assert_eq!(p.clone().fixed(5).draft_len(Source::Gram(1), 3), 3);
    }
}
