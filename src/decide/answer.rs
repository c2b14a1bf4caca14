//! From raw scores to a System One answer: a softmax at the question type's temperature (the
//! calibration), the average over option orders, the TypeSafe confidence formulas, and the
//! answer's JSON (`choice` / `noul` / `score` with `probabilities`, `confidence`, `legend`).

use super::request::{Kind, Question};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Softmax temperatures by question type, and by type and the option count's bucket, as
/// llama.cpp reads `<arch>.decision.temperature.<type>[.<bucket>]`: the bucketed one first,
/// then the type's, else 1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Temperatures {
    /// `choice`, `choice.3_5`, `noul`, … → temperature (> 0).
    pub by_name: BTreeMap<String, f64>,
    /// lev's buckets (`small` ≤ 8, `mid` ≤ 26, `large`) instead of `2`, `3_5`, `6_10`, `11`.
    pub lev_buckets: bool,
    /// Per question type, a bias added to each option's scaled score by the position it was
    /// shown at (`decide fit --position-bias`: a small model's preference for the first
    /// option, or for "A", cancelled); positions past its end add nothing.
    pub position_bias: BTreeMap<String, Vec<f64>>,
}

impl Temperatures {
    pub fn bucket(&self, n: usize) -> &'static str {
        if self.lev_buckets {
            match n {
                0..=8 => "small",
                9..=26 => "mid",
                _ => "large",
            }
        } else {
            match n {
                0..=2 => "2",
                3..=5 => "3_5",
                6..=10 => "6_10",
                _ => "11",
            }
        }
    }

    /// The position bias for `kind` (empty: none).
    pub fn bias(&self, kind: Kind) -> &[f64] {
        self.position_bias
            .get(kind.name())
            .map_or(&[], |b| b.as_slice())
    }

    pub fn get(&self, kind: Kind, n_options: usize) -> f64 {
        let t = kind.name();
        let bucketed = format!("{t}.{}", self.bucket(n_options));
        self.by_name
            .get(&bucketed)
            .or_else(|| self.by_name.get(t))
            .copied()
            .unwrap_or(1.0)
    }
}

/// `softmax(scores / t)` in f64.
pub fn softmax_at(scores: &[f64], t: f64) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| ((s - max) / t).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|x| x / sum).collect()
}

/// One question's probabilities over its options from its variants' raw scores: a softmax of
/// each at `t`, averaged. `reversed[v]` says variant `v` listed (and scored) the options in
/// reverse order.
pub fn probabilities(variants: &[(Vec<f64>, bool)], t: f64) -> Vec<f64> {
    probabilities_with(variants, t, &[])
}

/// [`probabilities`] with a position bias: variant `v`'s option shown at position `i` scores
/// `s_i / t + bias[i]`.
pub fn probabilities_with(variants: &[(Vec<f64>, bool)], t: f64, bias: &[f64]) -> Vec<f64> {
    let n = variants.first().map_or(0, |v| v.0.len());
    let mut p = vec![0.0; n];
    for (scores, reversed) in variants {
        let z: Vec<f64> = scores
            .iter()
            .enumerate()
            .map(|(i, s)| s / t + bias.get(i).copied().unwrap_or(0.0))
            .collect();
        for (i, q) in softmax_at(&z, 1.0).into_iter().enumerate() {
            let at = if *reversed { n - 1 - i } else { i };
            p[at] += q / variants.len() as f64;
        }
    }
    p
}

/// TypeSafe's choice confidence: how far the top probability is above uniform, in [0, 1].
pub fn confidence_choice(p: &[f64]) -> f64 {
    if p.len() < 2 {
        return 1.0;
    }
    let u = 1.0 / p.len() as f64;
    let top = p.iter().copied().fold(0.0, f64::max);
    ((top - u) / (1.0 - u)).max(0.0)
}

/// TypeSafe's score confidence: 1 − the mean distance to the most likely level, relative to a
/// uniform distribution's mean distance from the middle.
pub fn confidence_score(p: &[f64]) -> f64 {
    let n = p.len();
    if n < 2 {
        return 1.0;
    }
    let mode = argmax(p);
    let (mut dist, mut uniform) = (0.0, 0.0);
    for (i, q) in p.iter().enumerate() {
        dist += q * (i as f64 - mode as f64).abs();
        uniform += (i as f64 - (n - 1) as f64 / 2.0).abs() / n as f64;
    }
    (1.0 - dist / uniform).max(0.0)
}

/// The first index of the largest value.
pub fn argmax(p: &[f64]) -> usize {
    let mut best = 0;
    for (i, &q) in p.iter().enumerate() {
        if q > p[best] {
            best = i;
        }
    }
    best
}

/// The answer to `q` from its probabilities over `q.options`.
pub fn answer(q: &Question, p: &[f64]) -> Value {
    match q.kind {
        Kind::Noul => {
            let yes = q
                .options
                .iter()
                .position(|o| o.key == "true")
                .map_or(0.0, |i| p[i]);
            json!({"type": "noul", "noul": yes})
        }
        Kind::Choice => {
            let probs: Map<String, Value> = q
                .options
                .iter()
                .zip(p)
                .map(|(o, &v)| (o.key.clone(), json!(v)))
                .collect();
            json!({"type": "choice", "choice": q.options[argmax(p)].key,
                   "confidence": confidence_choice(p), "probabilities": probs})
        }
        Kind::Score => {
            let expected: f64 = p.iter().enumerate().map(|(i, q)| i as f64 * q).sum();
            let legend: Map<String, Value> = q
                .options
                .iter()
                .map(|o| (o.key.clone(), o.description.clone()))
                .collect();
            let probs: Map<String, Value> = q
                .options
                .iter()
                .zip(p)
                .map(|(o, &v)| (o.key.clone(), json!(v)))
                .collect();
            json!({"type": "score", "score": expected, "confidence": confidence_score(p),
                   "legend": legend, "probabilities": probs})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidences_follow_the_published_formulas() {
        assert_eq!(confidence_choice(&[0.25; 4]), 0.0);
        assert!((confidence_choice(&[0.7, 0.1, 0.1, 0.1]) - 0.6).abs() < 1e-12);
        assert_eq!(confidence_choice(&[1.0]), 1.0);
        assert!((confidence_score(&[0.0, 0.0, 1.0]) - 1.0).abs() < 1e-12);
        // Uniform over 3 levels: mean distance to the mode (0) is 1; uniform's is 2/3.
        let u = confidence_score(&[1.0 / 3.0; 3]);
        assert_eq!(u, 0.0);
    }

    #[test]
    fn reversed_variants_average_back_into_option_order() {
        let p = probabilities(&[(vec![2.0, 0.0], false), (vec![0.0, 2.0], true)], 1.0);
        let q = softmax_at(&[2.0, 0.0], 1.0);
        assert!((p[0] - q[0]).abs() < 1e-15 && (p[1] - q[1]).abs() < 1e-15);
        let hot = probabilities(&[(vec![2.0, 0.0], false)], 2.0);
        assert!((hot[0] - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-15);
    }

    #[test]
    fn temperatures_look_up_bucket_then_type() {
        let mut t = Temperatures::default();
        t.by_name.insert("choice".into(), 2.0);
        t.by_name.insert("choice.3_5".into(), 0.5);
        assert_eq!(t.get(Kind::Choice, 4), 0.5);
        assert_eq!(t.get(Kind::Choice, 12), 2.0);
        assert_eq!(t.get(Kind::Noul, 2), 1.0);
    }
}
