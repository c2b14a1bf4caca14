//! How many tokens to propose: the most that pay, given what a proposal of this kind has been
//! worth so far and what a pass over more rows costs on this machine.
//!
//! The cost of a pass over `1 + k` rows, in one-row steps, is read from the curve the passes
//! themselves draw: each `k` tried is timed and kept (smoothed), because the curve is not a
//! line. The kernels take tokens in tiles (4 activation rows on AVX2, where a default int8x2
//! row is two), so a pass costs about the same up to a tile's edge and then jumps; AMX starts
//! at 8 rows. A `k` not timed yet is estimated from the nearest timed one below it plus the
//! measured marginal row cost `c` (`1 + c·k` when none is), and never above a timed `k` beyond
//! it nor below one before it: a pass over more rows does not cost less. A draft model adds
//! `d·k` (its steps, measured too). If each proposed token holds with probability `α` once the
//! ones before it held, the pass yields `1 + α + … + α^k` tokens on average. The policy
//! proposes the `k` that maximizes yield over cost, and nothing when no `k` beats a plain
//! step: free text, where n-grams rarely continue, so decodes at plain speed.

use super::MAX_ROWS;
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
    /// Seconds of a pass with `k` proposed rows, index `k` (smoothed; `None` until timed).
    curve: [Option<f64>; MAX_ROWS],
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
            curve: [None; MAX_ROWS],
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

    /// The cost of a pass with `k` proposed rows, in one-row steps: timed, or estimated from
    /// its timed neighbours (see the module's doc).
    pub fn pass_cost(&self, k: usize) -> f64 {
        let (row, _) = self.costs();
        let Some(step) = self.step else {
            return 1.0 + row * k as f64;
        };
        let at = |j: usize| self.curve.get(j).copied().flatten().map(|t| t / step);
        if k == 0 {
            return 1.0;
        }
        if let Some(c) = at(k) {
            return c;
        }
        let below = (1..k).rev().find_map(|j| at(j).map(|c| (j, c)));
        let above = (k + 1..MAX_ROWS).find_map(at);
        let (from, base) = below.unwrap_or((0, 1.0));
        let mut est = base + row * (k - from) as f64;
        if let Some(up) = above {
            est = est.min(up);
        }
        est.max(base)
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
        let draft = if source == Source::Model {
            self.costs().1
        } else {
            0.0
        };
        let (mut best, mut best_k) = (MARGIN, 0);
        let (mut yield_, mut a) = (1.0, 1.0);
        for k in 1..=room.min(MAX_ROWS - 1) {
            a *= alpha;
            yield_ += a;
            let gain = yield_ / (self.pass_cost(k) + draft * k as f64);
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
        if let Some(c) = self.curve.get_mut(proposed) {
            *c = Some(smooth(*c, t));
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

    /// A step-shaped curve (made up, of the kind tiles give): up to 3 proposals cost what a
    /// plain step does, 4 cost two. The policy reads the timed points (proposing 3, the last
    /// free row, where a line through the same points would say 1–2), bounds the untimed ones
    /// by their timed neighbours, and follows the curve when it changes.
    #[test]
    fn proposal_length_reads_the_timed_curve() {
        let mut p = timed(10.0);
        for _ in 0..10 {
            p.observe(Source::Streak, 3, 3, Duration::from_micros(10_300));
            p.observe(Source::Streak, 4, 3, Duration::from_millis(20));
        }
        assert!((p.pass_cost(3) - 1.03).abs() < 1e-9);
        assert!((p.pass_cost(4) - 2.0).abs() < 1e-9);
        // Untimed: 1 and 2 lie between a plain step and the timed 3; 9 is at least 4's cost.
        for k in [1, 2] {
            let c = p.pass_cost(k);
            assert!((1.0..=1.03).contains(&c), "k {k}: {c}");
        }
        assert!(p.pass_cost(9) >= 2.0);
        let alpha = p.alpha(Source::Streak);
        assert!((0.6..0.9).contains(&alpha), "{alpha}");
        assert_eq!(p.draft_len(Source::Streak, 15), 3);
        // The same acceptance through a straight line of the same average slope (a pass of
        // 1 + k rows at 1 + 0.25·k steps) pays less for 3 than the curve does.
        let line = |k: f64| (1.0 - alpha.powf(k + 1.0)) / (1.0 - alpha) / (1.0 + 0.25 * k);
        let curve = (1.0 - alpha.powi(4)) / (1.0 - alpha) / p.pass_cost(3);
        assert!(curve > line(3.0) && curve > line(1.0) && curve > line(2.0));
        // When 4..7 become cheap (a machine whose tiles are wider), the policy moves past 3.
        for _ in 0..30 {
            p.observe(Source::Streak, 7, 7, Duration::from_micros(10_500));
            p.observe(Source::Streak, 4, 4, Duration::from_micros(10_400));
        }
        assert!(p.draft_len(Source::Streak, 15) >= 7);
    }
}
