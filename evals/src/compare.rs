//! Drift between two runs of the same task (a full-precision build and a quantized one): both
//! scores, the difference, the items that flipped each way, and whether the difference is more
//! than noise. Items are paired by id, so the test is paired: McNemar's exact test on the
//! disagreements, and a paired bootstrap interval (items resampled whole) for the difference.
//!
//! A 0.4-point drift on 541 IFEval prompts is typically a handful of flips each way; the
//! p-value and the interval say whether that is a real shift or the usual churn.

use crate::results::{units, ItemScores, RunReport};
use crate::stats::{mcnemar_exact, paired_bootstrap_ci, PairedItem};
use crate::EvalError;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Bootstrap draws and seed: fixed, so a comparison is reproducible.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;
const BOOTSTRAP_SEED: u64 = 0x5EED_0006;

/// One run's items, from a `--json` report or a results log (`--out`).
#[derive(Clone, Debug)]
pub struct RunFile {
    pub path: PathBuf,
    pub task: String,
    pub model: String,
    pub items: Vec<ItemScores>,
}

fn data(path: &Path, line: usize, message: impl Into<String>) -> EvalError {
    EvalError::Data {
        path: path.to_owned(),
        line,
        message: message.into(),
    }
}

/// Reads a run: a JSON report (`{"task", "model", "items": [...]}`) or a results log (one
/// `{"task", "model", "id", "scores", ...}` per line; a torn last line is ignored).
pub fn read_run(path: impl AsRef<Path>) -> Result<RunFile, EvalError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_owned(),
        source,
    })?;
    if let Ok(report) = serde_json::from_str::<RunReport>(&text) {
        return Ok(RunFile {
            path: path.to_owned(),
            task: report.task,
            model: report.model,
            items: report.items,
        });
    }
    let mut task: Option<String> = None;
    let mut model = String::new();
    let mut items = Vec::new();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        let torn = i + 1 == lines.len() && !raw.ends_with('\n');
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) if torn => break,
            Err(e) => {
                return Err(data(
                    path,
                    i + 1,
                    format!("not a report or a results log: {e}"),
                ))
            }
        };
        let this_task = v["task"]
            .as_str()
            .ok_or_else(|| data(path, i + 1, "no \"task\""))?;
        match &task {
            None => {
                task = Some(this_task.to_string());
                model = v["model"].as_str().unwrap_or("").to_string();
            }
            Some(t) if t != this_task => {
                return Err(data(
                    path,
                    i + 1,
                    format!("task {this_task}, earlier lines {t}"),
                ))
            }
            _ => {}
        }
        let item: ItemScores = serde_json::from_value(v)
            .map_err(|e| data(path, i + 1, format!("expected \"id\" and \"scores\": {e}")))?;
        items.push(item);
    }
    let task = task.ok_or_else(|| EvalError::Invalid(format!("{}: no items", path.display())))?;
    Ok(RunFile {
        path: path.to_owned(),
        task,
        model,
        items,
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct Side {
    pub path: PathBuf,
    pub model: String,
    pub items: usize,
}

/// One metric, paired over the items both runs have.
#[derive(Clone, Debug, Serialize)]
pub struct MetricComparison {
    pub metric: String,
    /// Paired units (items, or instructions for list-valued scores).
    pub units: usize,
    pub a: f64,
    pub b: f64,
    /// b − a, as a fraction (× 100 for points).
    pub diff: f64,
    /// 95 % paired bootstrap interval of `diff`.
    pub ci95: Option<(f64, f64)>,
    /// Units right in A and wrong in B.
    pub a_only: usize,
    /// Units wrong in A and right in B.
    pub b_only: usize,
    /// Exact McNemar two-sided p-value on `a_only` vs `b_only`.
    pub mcnemar_p: f64,
    pub a_only_ids: Vec<String>,
    pub b_only_ids: Vec<String>,
}

/// Per instruction id (IFEval): how often each run followed it, and the flips.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnitGroup {
    pub count: usize,
    pub a: usize,
    pub b: usize,
    pub a_only: usize,
    pub b_only: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub task: String,
    pub a: Side,
    pub b: Side,
    pub paired_items: usize,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub metrics: Vec<MetricComparison>,
    /// For list-valued metrics with named units: metric → unit name → counts.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub per_instruction: BTreeMap<String, BTreeMap<String, UnitGroup>>,
}

/// An item id as the text runs are paired by (a string as itself, anything else as JSON).
pub fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn index(run: &RunFile) -> Result<HashMap<String, &ItemScores>, EvalError> {
    let mut by_id = HashMap::new();
    for item in &run.items {
        if by_id.insert(id_text(&item.id), item).is_some() {
            return Err(EvalError::Invalid(format!(
                "{}: item {} appears twice",
                run.path.display(),
                item.id
            )));
        }
    }
    Ok(by_id)
}

/// Pairs the items of `a` and `b` by id and compares every metric both have.
pub fn compare(a: &RunFile, b: &RunFile) -> Result<Comparison, EvalError> {
    if a.task != b.task {
        return Err(EvalError::Invalid(format!(
            "{} is task {}, {} is task {}: compare runs of the same task",
            a.path.display(),
            a.task,
            b.path.display(),
            b.task
        )));
    }
    let b_index = index(b)?;
    index(a)?;
    let pairs: Vec<(&ItemScores, &ItemScores)> = a
        .items
        .iter()
        .filter_map(|x| b_index.get(&id_text(&x.id)).map(|y| (x, *y)))
        .collect();
    if pairs.is_empty() {
        return Err(EvalError::Invalid(format!(
            "{} and {} have no item ids in common",
            a.path.display(),
            b.path.display()
        )));
    }
    let mut names: Vec<&String> = pairs
        .iter()
        .flat_map(|(x, _)| x.scores.keys())
        .filter(|k| {
            pairs
                .iter()
                .all(|(x, y)| x.scores.contains_key(*k) && y.scores.contains_key(*k))
        })
        .collect();
    names.sort();
    names.dedup();
    let mut metrics = Vec::new();
    let mut per_instruction = BTreeMap::new();
    for name in names {
        let (m, groups) = compare_metric(name, &pairs)?;
        metrics.push(m);
        if !groups.is_empty() {
            per_instruction.insert(name.clone(), groups);
        }
    }
    let paired = pairs.len();
    Ok(Comparison {
        task: a.task.clone(),
        a: Side {
            path: a.path.clone(),
            model: a.model.clone(),
            items: a.items.len(),
        },
        b: Side {
            path: b.path.clone(),
            model: b.model.clone(),
            items: b.items.len(),
        },
        paired_items: paired,
        only_in_a: a.items.len() - paired,
        only_in_b: b.items.len() - paired,
        metrics,
        per_instruction,
    })
}

fn compare_metric(
    name: &str,
    pairs: &[(&ItemScores, &ItemScores)],
) -> Result<(MetricComparison, BTreeMap<String, UnitGroup>), EvalError> {
    let (mut a_right, mut b_right, mut total) = (0usize, 0usize, 0usize);
    let (mut a_only_ids, mut b_only_ids) = (Vec::new(), Vec::new());
    let mut paired_items = Vec::with_capacity(pairs.len());
    let mut groups: BTreeMap<String, UnitGroup> = BTreeMap::new();
    for (x, y) in pairs {
        let bad = |item: &ItemScores| {
            EvalError::Invalid(format!(
                "item {}: score {name} is {}, not 0/1 or a list of them",
                item.id, item.scores[name]
            ))
        };
        let ux = units(&x.scores[name]).ok_or_else(|| bad(x))?;
        let uy = units(&y.scores[name]).ok_or_else(|| bad(y))?;
        if ux.len() != uy.len() {
            return Err(EvalError::Invalid(format!(
                "item {}: {name} has {} units in one run and {} in the other (different data?)",
                x.id,
                ux.len(),
                uy.len()
            )));
        }
        let is_list = x.scores[name].is_array();
        let unit_names = x
            .instruction_id_list
            .as_ref()
            .filter(|l| is_list && l.len() == ux.len());
        for (j, (&p, &q)) in ux.iter().zip(&uy).enumerate() {
            let label = if is_list {
                let unit = unit_names.map_or_else(|| j.to_string(), |l| l[j].clone());
                format!("{}:{unit}", id_text(&x.id))
            } else {
                id_text(&x.id)
            };
            match (p, q) {
                (true, false) => a_only_ids.push(label),
                (false, true) => b_only_ids.push(label),
                _ => {}
            }
            if let Some(l) = unit_names {
                let g = groups.entry(l[j].clone()).or_default();
                g.count += 1;
                g.a += usize::from(p);
                g.b += usize::from(q);
                g.a_only += usize::from(p && !q);
                g.b_only += usize::from(q && !p);
            }
        }
        let (ra, rb) = (
            ux.iter().filter(|&&v| v).count(),
            uy.iter().filter(|&&v| v).count(),
        );
        a_right += ra;
        b_right += rb;
        total += ux.len();
        paired_items.push(PairedItem {
            a: ra as f64,
            b: rb as f64,
            units: ux.len() as f64,
        });
    }
    let frac = |n: usize| {
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    };
    let m = MetricComparison {
        metric: name.to_string(),
        units: total,
        a: frac(a_right),
        b: frac(b_right),
        diff: frac(b_right) - frac(a_right),
        ci95: paired_bootstrap_ci(&paired_items, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED),
        a_only: a_only_ids.len(),
        b_only: b_only_ids.len(),
        mcnemar_p: mcnemar_exact(a_only_ids.len(), b_only_ids.len()),
        a_only_ids,
        b_only_ids,
    };
    Ok((m, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_reports_and_logs_alike_and_ignores_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let report = write(
            dir.path(),
            "a.json",
            r#"{"task": "gsm8k_cot", "model": "m", "n": 2, "metrics": {},
                "items": [{"id": 0, "scores": {"strict_match": 1}},
                          {"id": 1, "scores": {"strict_match": 0}}]}"#,
        );
        let log = write(
            dir.path(),
            "b.jsonl",
            "{\"task\":\"gsm8k_cot\",\"model\":\"q\",\"id\":1,\"scores\":{\"strict_match\":1}}\n\
             {\"task\":\"gsm8k_cot\",\"model\":\"q\",\"id\":0,\"scores\":{\"strict_match\":1}}\n\
             {\"task\":\"gsm8k_cot\",\"id\":2,\"sco",
        );
        let (a, b) = (read_run(&report).unwrap(), read_run(&log).unwrap());
        assert_eq!((a.model.as_str(), b.model.as_str()), ("m", "q"));
        assert_eq!(b.items.len(), 2);
        let c = compare(&a, &b).unwrap();
        assert_eq!(c.paired_items, 2);
        let m = &c.metrics[0];
        assert_eq!((m.a, m.b, m.diff), (0.5, 1.0, 0.5));
        assert_eq!((m.a_only, m.b_only), (0, 1));
        assert_eq!(m.b_only_ids, ["1"]);
        assert!((m.mcnemar_p - 1.0).abs() < 1e-12);
    }

    #[test]
    fn mismatched_runs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(
            dir.path(),
            "a.jsonl",
            "{\"task\":\"ifeval\",\"id\":1,\"scores\":{\"inst\":[1,0]}}\n",
        );
        let b = write(
            dir.path(),
            "b.jsonl",
            "{\"task\":\"ifeval\",\"id\":1,\"scores\":{\"inst\":[1]}}\n",
        );
        let e = compare(&read_run(&a).unwrap(), &read_run(&b).unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains("2 units in one run and 1 in the other"),
            "{e}"
        );
        let dup = write(
            dir.path(),
            "d.jsonl",
            "{\"task\":\"ifeval\",\"id\":1,\"scores\":{}}\n{\"task\":\"ifeval\",\"id\":1,\"scores\":{}}\n",
        );
        let e = compare(&read_run(&dup).unwrap(), &read_run(&a).unwrap()).unwrap_err();
        assert!(e.to_string().contains("item 1 appears twice"), "{e}");
        let mixed = write(
            dir.path(),
            "m.jsonl",
            "{\"task\":\"ifeval\",\"id\":1,\"scores\":{}}\n{\"task\":\"mc_cloze\",\"id\":2,\"scores\":{}}\n",
        );
        let e = read_run(&mixed).unwrap_err().to_string();
        assert!(
            e.ends_with("m.jsonl:2: task mc_cloze, earlier lines ifeval"),
            "{e}"
        );
    }
}
