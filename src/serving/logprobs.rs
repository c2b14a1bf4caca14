//! Log-probabilities of a sampled token and the most likely alternatives (OpenAI's `logprobs`
//! and `top_logprobs`), from the logits the sampler saw: after a request's logit bias, before
//! temperature, penalties and any constraint's mask.

/// The chosen token's log-probability and the `top` most likely tokens, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
    /// The constraint appended this token without sampling (the only one it allowed): its
    /// log-probability is reported as 0, its probability under the constraint; the model's
    /// logits at that position are never computed.
    pub forced: bool,
}

/// Log-softmax of `logits` at `chosen`, and the `top` best entries (ties: lower id first).
pub fn logprob_of(logits: &[f32], chosen: u32, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let lp = |l: f32| (l as f64 - log_z) as f32;
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if best.len() == top && l <= best[top - 1].1 {
                continue;
            }
            let at = best.partition_point(|&(_, b)| b >= l);
            best.insert(at, (i as u32, l));
            best.truncate(top);
        }
    }
    TokenLogprob {
        logprob: logits
            .get(chosen as usize)
            .map_or(f32::NEG_INFINITY, |&l| lp(l)),
        top: best.into_iter().map(|(i, l)| (i, lp(l))).collect(),
        forced: false,
    }
}

/// What a forced token reports: probability 1 under the constraint.
pub fn forced(id: u32, top: usize) -> TokenLogprob {
    TokenLogprob {
        logprob: 0.0,
        top: if top > 0 { vec![(id, 0.0)] } else { Vec::new() },
        forced: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_and_top_entries() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let t = logprob_of(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((t.logprob as f64 - (2.0 - z.ln())).abs() < 1e-6);
        assert_eq!(t.top.iter().map(|e| e.0).collect::<Vec<_>>(), [1, 3, 2]);
        let total: f64 = logits
            .iter()
            .map(|&l| (logprob_of(&logits, 0, 0).logprob as f64 - 1.0 + l as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(logprob_of(&logits, 0, 0).top.is_empty());
        assert_eq!(logprob_of(&logits, 0, 9).top.len(), 5);
    }
}
