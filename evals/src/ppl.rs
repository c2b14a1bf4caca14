//! Perplexity over a token stream, and the drift of one build from another on the same tokens:
//! mean KL divergence KL(baseline ‖ model) and how often their top-1 tokens agree.
//!
//! The stream is cut into windows of `window` tokens that do not overlap (each window starts
//! from an empty context); inside a window every token after the first is scored. With a
//! `prefix` (a BOS token, for models that expect one at the start of every context, as Gemma
//! does and as lm-evaluation-harness's rolling windows give), each window is the prefix and the
//! next `window − 1` tokens of the stream, and every stream token is scored.

use crate::{EvalError, LogitModel};
use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PplReport {
    pub ppl: f64,
    pub nll_mean: f64,
    /// Tokens scored.
    pub tokens: usize,
    pub windows: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kld_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top1_agree: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_ppl: Option<f64>,
}

pub struct PplOptions {
    pub window: usize,
    /// Tokens fed per call (bounds the logits held in memory: chunk × vocab floats).
    pub chunk: usize,
    /// A token opening every window (not scored).
    pub prefix: Option<u32>,
}

/// log-softmax of one row, in f64 for a stable KL.
pub(crate) fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = row
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    row.iter().map(|&v| v as f64 - lse).collect()
}

/// The index of the largest value; ties go to the first (as `np.argmax`).
pub(crate) fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

pub fn perplexity(
    model: &mut dyn LogitModel,
    mut baseline: Option<&mut dyn LogitModel>,
    tokens: &[u32],
    opts: &PplOptions,
    progress: &dyn Fn(usize, usize),
) -> Result<PplReport, EvalError> {
    if opts.window < 2 || opts.chunk == 0 {
        return Err(EvalError::Invalid(
            "the window must hold at least 2 tokens".into(),
        ));
    }
    if tokens.len() < 2 {
        return Err(EvalError::Invalid(format!(
            "the text has {} tokens; perplexity needs at least 2",
            tokens.len()
        )));
    }
    let vocab = model.vocab_size();
    if let Some(b) = &baseline {
        if b.vocab_size() != vocab {
            return Err(EvalError::Invalid(format!(
                "vocabularies differ: {vocab} vs {} (baseline)",
                b.vocab_size()
            )));
        }
    }
    let (mut nll, mut base_nll, mut kld, mut agree, mut scored, mut windows) =
        (0.0f64, 0.0f64, 0.0f64, 0usize, 0usize, 0usize);
    let step = opts.window - usize::from(opts.prefix.is_some());
    let windows_of = tokens
        .chunks(step)
        .map(|w| opts.prefix.iter().chain(w).copied().collect());
    for window in windows_of.filter(|w: &Vec<u32>| w.len() >= 2) {
        model.reset();
        if let Some(b) = baseline.as_deref_mut() {
            b.reset();
        }
        windows += 1;
        let mut start = 0;
        while start < window.len() - 1 {
            // Feed tokens [start, end); score predictions of tokens start+1 ..= end.
            let end = (start + opts.chunk).min(window.len() - 1);
            let feed = &window[start..end];
            let logits = model.logits(feed).map_err(EvalError::Model)?;
            let base = match baseline.as_deref_mut() {
                Some(b) => Some(b.logits(feed).map_err(EvalError::Model)?),
                None => None,
            };
            for i in 0..feed.len() {
                let target = window[start + i + 1] as usize;
                let row = &logits[i * vocab..(i + 1) * vocab];
                let lp = log_softmax(row);
                nll -= lp[target];
                if let Some(base) = &base {
                    let brow = &base[i * vocab..(i + 1) * vocab];
                    let blp = log_softmax(brow);
                    base_nll -= blp[target];
                    kld += blp
                        .iter()
                        .zip(&lp)
                        .map(|(&b, &m)| b.exp() * (b - m))
                        .sum::<f64>();
                    agree += usize::from(argmax(row) == argmax(brow));
                }
            }
            scored += feed.len();
            start = end;
            progress(scored.min(tokens.len()), tokens.len());
        }
    }
    let n = scored as f64;
    let has_base = baseline.is_some();
    Ok(PplReport {
        ppl: (nll / n).exp(),
        nll_mean: nll / n,
        tokens: scored,
        windows,
        kld_mean: has_base.then_some(kld / n),
        top1_agree: has_base.then_some(agree as f64 / n),
        baseline_ppl: has_base.then_some((base_nll / n).exp()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bigram model: logits depend only on the previous token.
    struct Bigram {
        table: Vec<Vec<f32>>,
        calls: usize,
    }

    impl LogitModel for Bigram {
        fn vocab_size(&self) -> usize {
            self.table.len()
        }
        fn reset(&mut self) {}
        fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
            self.calls += 1;
            Ok(tokens
                .iter()
                .flat_map(|&t| self.table[t as usize].clone())
                .collect())
        }
    }

    #[test]
    fn uniform_model_has_perplexity_vocab_and_kl_is_zero_against_itself() {
        let mut m = Bigram {
            table: vec![vec![0.0; 5]; 5],
            calls: 0,
        };
        let mut b = Bigram {
            table: vec![vec![0.0; 5]; 5],
            calls: 0,
        };
        let toks: Vec<u32> = (0..100).map(|i| (i * 3 % 5) as u32).collect();
        let r = perplexity(
            &mut m,
            Some(&mut b),
            &toks,
            &PplOptions {
                window: 10,
                chunk: 4,
                prefix: None,
            },
            &|_, _| {},
        )
        .unwrap();
        assert!((r.ppl - 5.0).abs() < 1e-9);
        assert_eq!(r.tokens, 90); // 10 windows × 9 scored tokens
        assert_eq!(r.kld_mean, Some(0.0));
        assert_eq!(r.top1_agree, Some(1.0));
    }

    #[test]
    fn matches_hand_computed_nll_and_kl() {
        // Model: always p(0) = 0.5, p(1) = 0.5. Baseline: p(0) = e/(1+e), p(1) = 1/(1+e).
        let mut m = Bigram {
            table: vec![vec![0.0, 0.0]; 2],
            calls: 0,
        };
        let mut b = Bigram {
            table: vec![vec![1.0, 0.0]; 2],
            calls: 0,
        };
        let toks = [0u32, 0, 1, 0];
        let r = perplexity(
            &mut m,
            Some(&mut b),
            &toks,
            &PplOptions {
                window: 4,
                chunk: 2,
                prefix: None,
            },
            &|_, _| {},
        )
        .unwrap();
        assert!((r.nll_mean - 2f64.ln()).abs() < 1e-12);
        let p = std::f64::consts::E / (1.0 + std::f64::consts::E);
        let kl = p * (p / 0.5).ln() + (1.0 - p) * ((1.0 - p) / 0.5).ln();
        assert!((r.kld_mean.unwrap() - kl).abs() < 1e-9);
        assert_eq!(r.top1_agree, Some(1.0)); // argmax ties resolve to token 0 in both
        let base_nll = -(2.0 * p.ln() + (1.0 - p).ln()) / 3.0;
        assert!((r.baseline_ppl.unwrap() - base_nll.exp()).abs() < 1e-9);
        assert_eq!(m.calls, 2);
    }

    /// With a prefix, windows are the prefix plus `window − 1` stream tokens, and every stream
    /// token is scored once (conditioned on the prefix at a window's start).
    #[test]
    fn a_prefix_opens_every_window_and_every_token_is_scored() {
        // p(next) depends on the previous token: after 9 (the prefix), token 0 is certain.
        let mut table = vec![vec![0.0f32; 10]; 10];
        table[9] = vec![-1e9; 10];
        table[9][0] = 0.0;
        let mut m = Bigram { table, calls: 0 };
        let toks: Vec<u32> = vec![0, 1, 2, 0, 1, 2, 0];
        let r = perplexity(
            &mut m,
            None,
            &toks,
            &PplOptions {
                window: 4,
                chunk: 8,
                prefix: Some(9),
            },
            &|_, _| {},
        )
        .unwrap();
        // Windows [9,0,1,2] [9,0,1,2] [9,0]: 7 tokens scored; the three after the prefix cost
        // nothing, the other four are uniform over 10.
        assert_eq!((r.tokens, r.windows), (7, 3));
        assert!((r.nll_mean - 4.0 * 10f64.ln() / 7.0).abs() < 1e-9);
    }
}
