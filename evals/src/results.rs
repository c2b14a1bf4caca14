//! The per-item scores every task writes, what a report averages and what
//! [`compare`](crate::compare) pairs: `{"id": …, "scores": {"metric": 0 | 1 | [0, 1, …]}}`.
//! A metric holding a list has several units per item (IFEval's instruction-level scores: one
//! per instruction); its score is the share of all units, as lm-eval's `agg_inst_level_acc`.

use crate::stats::mean_stderr;
use crate::EvalError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemScores {
    /// The item's identity in its data set (IFEval's key, a row index, a user id).
    pub id: Value,
    pub scores: BTreeMap<String, Value>,
    /// Names the units of list-valued scores (IFEval's instruction ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction_id_list: Option<Vec<String>>,
}

/// One metric over a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricSummary {
    pub value: f64,
    /// lm-eval's standard error of the mean over units (null below 2).
    pub stderr: Option<f64>,
    pub units: usize,
}

/// A binary score as a list of unit outcomes: `0`/`1`/`true`/`false`, or a list of them.
pub fn units(score: &Value) -> Option<Vec<bool>> {
    fn one(v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            Value::Number(n) => match n.as_f64() {
                Some(0.0) => Some(false),
                Some(1.0) => Some(true),
                _ => None,
            },
            _ => None,
        }
    }
    match score {
        Value::Array(a) => a.iter().map(one).collect(),
        v => one(v).map(|b| vec![b]),
    }
}

/// The mean of every metric over `items` (metrics missing from an item are skipped for it).
pub fn summarize(items: &[ItemScores]) -> Result<BTreeMap<String, MetricSummary>, EvalError> {
    let mut all: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for item in items {
        for (name, score) in &item.scores {
            let u = units(score).ok_or_else(|| {
                EvalError::Invalid(format!(
                    "item {}: score {name} is {score}, not 0/1 or a list of them",
                    item.id
                ))
            })?;
            all.entry(name.clone())
                .or_default()
                .extend(u.into_iter().map(f64::from));
        }
    }
    Ok(all
        .into_iter()
        .map(|(name, v)| {
            let value = if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            };
            let summary = MetricSummary {
                value,
                stderr: mean_stderr(&v),
                units: v.len(),
            };
            (name, summary)
        })
        .collect())
}

/// A task's report as `--json` prints it and `compare` reads it back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    /// e.g. `ifeval`, `gsm8k_cot`, `mc`.
    pub task: String,
    pub model: String,
    /// Items scored.
    pub n: usize,
    pub metrics: BTreeMap<String, MetricSummary>,
    /// Task-specific details (the IFEval per-instruction table, the data file, settings).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
    pub items: Vec<ItemScores>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_scores_average_over_units() {
        let items = vec![
            ItemScores {
                id: json!(1),
                scores: [("p".to_string(), json!(1)), ("i".into(), json!([1, 0, 1]))].into(),
                instruction_id_list: None,
            },
            ItemScores {
                id: json!(2),
                scores: [("p".to_string(), json!(false)), ("i".into(), json!([true]))].into(),
                instruction_id_list: None,
            },
        ];
        let s = summarize(&items).unwrap();
        assert_eq!(s["p"].value, 0.5);
        assert_eq!(s["i"].value, 0.75);
        assert_eq!(s["i"].units, 4);
        let bad = ItemScores {
            id: json!("x"),
            scores: [("p".to_string(), json!(0.5))].into(),
            instruction_id_list: None,
        };
        let e = summarize(&[bad]).unwrap_err().to_string();
        assert_eq!(e, "item \"x\": score p is 0.5, not 0/1 or a list of them");
    }
}
