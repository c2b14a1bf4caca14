//! Scoring one answer against its target.

use super::extract::{as_text, first_json_object, normalize};
use super::spec::{Metric, Normalize};
use serde_json::{json, Value};

/// An item's scores: binary ones as `ItemScores` takes them (a list for per-field units), and
/// token F1 as a number.
pub struct Scored {
    pub scores: Vec<(String, Value)>,
    pub f1: Option<f64>,
}

pub fn score(metric: Metric, answer: Option<&str>, target: &str, n: &Normalize) -> Scored {
    match metric {
        Metric::ExactMatch | Metric::Accuracy => {
            let ok = answer.is_some_and(|a| normalize(a, n) == normalize(target, n));
            let name = if metric == Metric::Accuracy {
                "accuracy"
            } else {
                "exact_match"
            };
            Scored {
                scores: vec![(name.into(), json!(ok as u8))],
                f1: None,
            }
        }
        Metric::TokenF1 => {
            let f1 = answer.map_or(0.0, |a| token_f1(&normalize(a, n), &normalize(target, n)));
            let em = answer.is_some_and(|a| normalize(a, n) == normalize(target, n));
            Scored {
                scores: vec![("exact_match".into(), json!(em as u8))],
                f1: Some(f1),
            }
        }
        Metric::JsonFields => {
            let gold = first_json_object(target);
            let got = answer.and_then(first_json_object);
            let fields: Vec<bool> = match &gold {
                Some(Value::Object(g)) => g
                    .iter()
                    .map(|(k, want)| {
                        got.as_ref()
                            .and_then(|o| o.get(k))
                            .is_some_and(|v| same_value(v, want, n))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let all = !fields.is_empty() && fields.iter().all(|&b| b);
            Scored {
                scores: vec![
                    ("field_accuracy".into(), json!(fields)),
                    ("all_fields".into(), json!(all as u8)),
                ],
                f1: None,
            }
        }
    }
}

/// Strings compared after normalisation, other values as JSON (1 and 1.0 alike).
fn same_value(a: &Value, b: &Value, n: &Normalize) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(_), _) | (_, Value::String(_)) => {
            normalize(&as_text(a), n) == normalize(&as_text(b), n)
        }
        _ => a == b,
    }
}

/// SQuAD's token F1 on whitespace tokens (multiset overlap).
pub fn token_f1(answer: &str, target: &str) -> f64 {
    let a: Vec<&str> = answer.split_whitespace().collect();
    let t: Vec<&str> = target.split_whitespace().collect();
    if a.is_empty() || t.is_empty() {
        return (a.is_empty() && t.is_empty()) as u8 as f64;
    }
    let mut counts = std::collections::HashMap::new();
    for w in &t {
        *counts.entry(*w).or_insert(0i64) += 1;
    }
    let mut common = 0i64;
    for w in &a {
        if let Some(c) = counts.get_mut(w) {
            if *c > 0 {
                *c -= 1;
                common += 1;
            }
        }
    }
    if common == 0 {
        return 0.0;
    }
    let p = common as f64 / a.len() as f64;
    let r = common as f64 / t.len() as f64;
    2.0 * p * r / (p + r)
}
