//! Calibration on your own samples: a softmax temperature per question type fitted by
//! log loss, the metrics that judge it (accuracy, log loss, Brier score, expected calibration
//! error), and a probe head trained on the frozen model's hidden states.
//!
//! Everything here works on scores already read from the model (one forward pass per row),
//! so fitting takes seconds.

use super::answer::{argmax, probabilities};
use super::request::Kind;
use serde::Serialize;

/// One labelled row's readout: its variants' raw scores, and the gold option's index.
#[derive(Clone, Debug)]
pub struct Scored {
    pub kind: Kind,
    pub variants: Vec<(Vec<f64>, bool)>,
    pub gold: usize,
}

/// How well probabilities match the gold answers.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Metrics {
    pub n: usize,
    pub accuracy: f64,
    /// Mean −ln p(gold).
    pub log_loss: f64,
    /// Mean Σ_i (p_i − [i = gold])².
    pub brier: f64,
    /// Expected calibration error over 10 equal-width bins of the top probability.
    pub ece: f64,
}

/// Metrics of `probs` (one distribution per row) against `gold`.
pub fn metrics(probs: &[Vec<f64>], gold: &[usize]) -> Metrics {
    let n = probs.len();
    if n == 0 {
        return Metrics::default();
    }
    let (mut acc, mut ll, mut brier) = (0.0, 0.0, 0.0);
    let mut bins = [(0usize, 0.0f64, 0.0f64); 10];
    for (p, &g) in probs.iter().zip(gold) {
        let top = argmax(p);
        let hit = (top == g) as u8 as f64;
        acc += hit;
        ll -= p[g].max(1e-12).ln();
        brier += p
            .iter()
            .enumerate()
            .map(|(i, &q)| (q - (i == g) as u8 as f64).powi(2))
            .sum::<f64>();
        let conf = p[top];
        let b = ((conf * 10.0) as usize).min(9);
        bins[b].0 += 1;
        bins[b].1 += conf;
        bins[b].2 += hit;
    }
    let ece = bins
        .iter()
        .filter(|b| b.0 > 0)
        .map(|&(_, conf, hits)| (hits - conf).abs() / n as f64)
        .sum();
    let nf = n as f64;
    Metrics {
        n,
        accuracy: acc / nf,
        log_loss: ll / nf,
        brier: brier / nf,
        ece,
    }
}

/// The rows' probabilities at temperature `t`.
pub fn probs_at(rows: &[&Scored], t: f64) -> Vec<Vec<f64>> {
    rows.iter().map(|r| probabilities(&r.variants, t)).collect()
}

/// Mean log loss of `rows` at temperature `t`.
fn loss_at(rows: &[&Scored], t: f64) -> f64 {
    rows.iter()
        .map(|r| -probabilities(&r.variants, t)[r.gold].max(1e-300).ln())
        .sum::<f64>()
        / rows.len().max(1) as f64
}

/// The temperature in [0.02, 50] that minimises the rows' log loss: a grid over ln t, then a
/// golden-section search around its best point.
pub fn fit_temperature(rows: &[&Scored]) -> f64 {
    if rows.is_empty() {
        return 1.0;
    }
    let (lo, hi) = (0.02f64.ln(), 50f64.ln());
    let steps = 60;
    let at = |i: usize| lo + (hi - lo) * i as f64 / steps as f64;
    let best = (0..=steps)
        .min_by(|&a, &b| {
            loss_at(rows, at(a).exp())
                .partial_cmp(&loss_at(rows, at(b).exp()))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .unwrap_or(steps / 2);
    let (mut a, mut b) = (at(best.saturating_sub(1)), at((best + 1).min(steps)));
    let g = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..60 {
        let c = b - g * (b - a);
        let d = a + g * (b - a);
        if loss_at(rows, c.exp()) < loss_at(rows, d.exp()) {
            b = d;
        } else {
            a = c;
        }
    }
    ((a + b) / 2.0).exp()
}

/// A temperature and a position bias for `rows` (one question type), fitted together by log
/// loss (full-batch Adam on β = 1/t and the biases, from the fitted temperature; the first
/// position's bias held at 0, as only differences count; a small L2 keeps rare positions
/// near 0). Returns (t, bias).
pub fn fit_position_bias(rows: &[&Scored]) -> (f64, Vec<f64>) {
    let t0 = fit_temperature(rows);
    let n_pos = rows
        .iter()
        .flat_map(|r| r.variants.iter().map(|v| v.0.len()))
        .max()
        .unwrap_or(0);
    if rows.is_empty() || n_pos < 2 {
        return (t0, Vec::new());
    }
    let mut beta = 1.0 / t0;
    let mut c = vec![0.0; n_pos];
    let (lr, b1, b2, eps, l2): (f64, f64, f64, f64, f64) = (0.02, 0.9, 0.999, 1e-8, 1e-3);
    let mut m = vec![0.0; n_pos + 1];
    let mut v = vec![0.0; n_pos + 1];
    let nrows = rows.len() as f64;
    for step in 1..=600 {
        let mut g = vec![0.0; n_pos + 1];
        for r in rows {
            let n = r.variants[0].0.len();
            let nv = r.variants.len() as f64;
            // Each variant's softmax, and P(gold) averaged over variants.
            let qs: Vec<Vec<f64>> = r
                .variants
                .iter()
                .map(|(s, _)| {
                    let z: Vec<f64> = s.iter().enumerate().map(|(i, x)| beta * x + c[i]).collect();
                    super::answer::softmax_at(&z, 1.0)
                })
                .collect();
            let gold_at = |rev: bool| if rev { n - 1 - r.gold } else { r.gold };
            let pg: f64 = r
                .variants
                .iter()
                .zip(&qs)
                .map(|((_, rev), q)| q[gold_at(*rev)] / nv)
                .sum::<f64>()
                .max(1e-300);
            for ((s, rev), q) in r.variants.iter().zip(&qs) {
                let gi = gold_at(*rev);
                let w = -q[gi] / nv / pg / nrows;
                for i in 0..n {
                    let d = w * ((i == gi) as u8 as f64 - q[i]);
                    g[0] += d * s[i];
                    g[1 + i] += d;
                }
            }
        }
        for i in 1..n_pos {
            g[1 + i] += l2 * c[i];
        }
        g[1] = 0.0;
        let (c1, c2) = (1.0 - b1.powi(step), 1.0 - b2.powi(step));
        for k in 0..=n_pos {
            m[k] = b1 * m[k] + (1.0 - b1) * g[k];
            v[k] = b2 * v[k] + (1.0 - b2) * g[k] * g[k];
            let delta = lr * (m[k] / c1) / ((v[k] / c2).sqrt() + eps);
            if k == 0 {
                beta = (beta - delta * beta.max(1e-3)).max(1e-3);
            } else {
                c[k - 1] -= delta;
            }
        }
    }
    (1.0 / beta, c)
}

/// A multinomial logistic regression on feature rows: the probe head's weights.
pub struct Probe {
    /// `[classes, dim]`, over the raw (unstandardised) features.
    pub w: Vec<f32>,
    pub b: Vec<f32>,
    /// The L2 strength the held-out folds chose.
    pub l2: f64,
}

/// Trains a probe on `x` (`n × dim`) with labels `y` in `0..classes`: features standardised,
/// softmax regression with an L2 penalty chosen from a few by two-fold cross-validation, full
/// batch Adam, then the standardisation folded into the weights.
pub fn train_probe(x: &[Vec<f32>], y: &[usize], classes: usize) -> Probe {
    let n = x.len();
    let dim = x.first().map_or(0, Vec::len);
    let mean: Vec<f64> = (0..dim)
        .map(|j| x.iter().map(|r| r[j] as f64).sum::<f64>() / n.max(1) as f64)
        .collect();
    let sd: Vec<f64> = (0..dim)
        .map(|j| {
            let v = x
                .iter()
                .map(|r| (r[j] as f64 - mean[j]).powi(2))
                .sum::<f64>()
                / n.max(1) as f64;
            v.sqrt().max(1e-6)
        })
        .collect();
    let z: Vec<Vec<f64>> = x
        .iter()
        .map(|r| (0..dim).map(|j| (r[j] as f64 - mean[j]) / sd[j]).collect())
        .collect();
    let candidates = [1e-3, 1e-2, 1e-1, 1.0];
    let l2 = if n >= 4 {
        let folds: [Vec<usize>; 2] = [
            (0..n).filter(|i| i % 2 == 0).collect(),
            (0..n).filter(|i| i % 2 == 1).collect(),
        ];
        let mut best = (f64::INFINITY, candidates[1]);
        for &l in &candidates {
            let mut loss = 0.0;
            for f in 0..2 {
                let (tr, te) = (&folds[f], &folds[1 - f]);
                let (w, b) = softmax_regression(
                    &tr.iter().map(|&i| &z[i][..]).collect::<Vec<_>>(),
                    &tr.iter().map(|&i| y[i]).collect::<Vec<_>>(),
                    classes,
                    l,
                );
                for &i in te {
                    let p = class_probs(&w, &b, &z[i], classes);
                    loss -= p[y[i]].max(1e-12).ln();
                }
            }
            if loss < best.0 {
                best = (loss, l);
            }
        }
        best.1
    } else {
        candidates[1]
    };
    let rows: Vec<&[f64]> = z.iter().map(|r| &r[..]).collect();
    let (w, b) = softmax_regression(&rows, y, classes, l2);
    // Fold the standardisation in: w' = w / sd, b' = b − Σ w' mean.
    let mut wf = vec![0f32; classes * dim];
    let mut bf = vec![0f32; classes];
    for c in 0..classes {
        let mut shift = 0.0;
        for j in 0..dim {
            let v = w[c * dim + j] / sd[j];
            wf[c * dim + j] = v as f32;
            shift += v * mean[j];
        }
        bf[c] = (b[c] - shift) as f32;
    }
    Probe { w: wf, b: bf, l2 }
}

fn class_probs(w: &[f64], b: &[f64], z: &[f64], classes: usize) -> Vec<f64> {
    let dim = z.len();
    let logits: Vec<f64> = (0..classes)
        .map(|c| {
            b[c] + w[c * dim..(c + 1) * dim]
                .iter()
                .zip(z)
                .map(|(a, x)| a * x)
                .sum::<f64>()
        })
        .collect();
    super::answer::softmax_at(&logits, 1.0)
}

/// Full-batch Adam on the mean cross-entropy plus `l2 / 2 · |w|²`.
fn softmax_regression(z: &[&[f64]], y: &[usize], classes: usize, l2: f64) -> (Vec<f64>, Vec<f64>) {
    let dim = z.first().map_or(0, |r| r.len());
    let mut w = vec![0.0; classes * dim];
    let mut b = vec![0.0; classes];
    let (mut mw, mut vw) = (vec![0.0; w.len()], vec![0.0; w.len()]);
    let (mut mb, mut vb) = (vec![0.0; classes], vec![0.0; classes]);
    let (lr, b1, b2, eps): (f64, f64, f64, f64) = (0.05, 0.9, 0.999, 1e-8);
    let n = z.len().max(1) as f64;
    for step in 1..=400 {
        let mut gw: Vec<f64> = w.iter().map(|v| l2 * v).collect();
        let mut gb = vec![0.0; classes];
        for (row, &label) in z.iter().zip(y) {
            let p = class_probs(&w, &b, row, classes);
            for c in 0..classes {
                let d = (p[c] - (c == label) as u8 as f64) / n;
                gb[c] += d;
                for (g, x) in gw[c * dim..(c + 1) * dim].iter_mut().zip(row.iter()) {
                    *g += d * x;
                }
            }
        }
        let (c1, c2) = (1.0 - b1.powi(step), 1.0 - b2.powi(step));
        for i in 0..w.len() {
            mw[i] = b1 * mw[i] + (1.0 - b1) * gw[i];
            vw[i] = b2 * vw[i] + (1.0 - b2) * gw[i] * gw[i];
            w[i] -= lr * (mw[i] / c1) / ((vw[i] / c2).sqrt() + eps);
        }
        for c in 0..classes {
            mb[c] = b1 * mb[c] + (1.0 - b1) * gb[c];
            vb[c] = b2 * vb[c] + (1.0 - b2) * gb[c] * gb[c];
            b[c] -= lr * (mb[c] / c1) / ((vb[c] / c2).sqrt() + eps);
        }
    }
    (w, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_of_certain_and_uniform_answers() {
        let m = metrics(&[vec![1.0, 0.0], vec![0.0, 1.0]], &[0, 0]);
        assert_eq!(m.accuracy, 0.5);
        assert_eq!(m.brier, 1.0);
        assert!((m.ece - 0.5).abs() < 1e-12);
        let u = metrics(&[vec![0.5, 0.5]], &[1]);
        assert!((u.log_loss - 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn an_overconfident_readout_is_cooled() {
        // Scores that always favour the right answer by 10 nats, but are right 3 times in 4:
        // the best temperature is well above 1.
        let rows: Vec<Scored> = (0..40)
            .map(|i| Scored {
                kind: Kind::Noul,
                variants: vec![(vec![10.0, 0.0], false)],
                gold: (i % 4 == 0) as usize,
            })
            .collect();
        let refs: Vec<&Scored> = rows.iter().collect();
        let t = fit_temperature(&refs);
        // p = 0.75 ⇔ 10 / t = ln 3.
        assert!((t - 10.0 / 3f64.ln()).abs() < 1e-3, "{t}");
    }

    #[test]
    fn a_position_bias_is_fitted_away() {
        // Three options; the readout adds 2 to whatever is shown first, and 1 to the gold.
        let rows: Vec<Scored> = (0..300)
            .map(|i| {
                let gold = i % 3;
                let mut s = vec![0.0; 3];
                s[0] += 2.0;
                s[gold] += 1.0;
                Scored {
                    kind: Kind::Choice,
                    variants: vec![(s, false)],
                    gold,
                }
            })
            .collect();
        let refs: Vec<&Scored> = rows.iter().collect();
        let before = metrics(
            &probs_at(&refs, 1.0),
            &rows.iter().map(|r| r.gold).collect::<Vec<_>>(),
        );
        let (t, c) = fit_position_bias(&refs);
        let probs: Vec<Vec<f64>> = refs
            .iter()
            .map(|r| super::super::answer::probabilities_with(&r.variants, t, &c))
            .collect();
        let after = metrics(&probs, &rows.iter().map(|r| r.gold).collect::<Vec<_>>());
        assert!((before.accuracy - 1.0 / 3.0).abs() < 1e-9, "{before:?}");
        assert_eq!(after.accuracy, 1.0, "{after:?} t {t} c {c:?}");
        // Only differences count: the first position's +2 is cancelled by the others' rise.
        assert!(
            (c[1] - c[2]).abs() < 0.1 && c[1] - c[0] > 1.0 / t,
            "t {t} c {c:?}"
        );
    }

    #[test]
    fn a_probe_separates_separable_classes() {
        let x: Vec<Vec<f32>> = (0..40)
            .map(|i| {
                vec![
                    (i % 2) as f32 * 2.0 - 1.0 + (i as f32 * 0.37).sin() * 0.3,
                    5.0,
                ]
            })
            .collect();
        let y: Vec<usize> = (0..40).map(|i| i % 2).collect();
        let p = train_probe(&x, &y, 2);
        let right = x
            .iter()
            .zip(&y)
            .filter(|(r, &c)| {
                let s = |k: usize| p.w[k * 2] * r[0] + p.w[k * 2 + 1] * r[1] + p.b[k];
                (s(1) > s(0)) == (c == 1)
            })
            .count();
        assert_eq!(right, 40);
    }
}
