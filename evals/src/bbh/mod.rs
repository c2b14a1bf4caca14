//! BIG-Bench Hard with chain of thought, as lm-eval 0.4.13's `bbh_cot_fewshot` group runs it:
//! per task its description, three exemplars ("Q: …\nA: Let's think step by step.\n" then the
//! worked answer, "\n\n" between), the question, greedy generation until "</s>", "Q" or "\n\n"
//! (1,024 tokens), then the [`filter`]'s answer and `exact_match` against the target. The
//! exemplars and settings are lm-eval's yaml as data (`evals/data/bbh/cot_fewshot.json`, made
//! by scripts/bbh_data.py); the prompts equal lm-eval's request strings
//! (evals/tests/mc_requests.rs).

pub mod filter;

pub use filter::{answer, is_correct};

use crate::{EvalError, GenRequest, Prompt};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

const SPEC: &str = include_str!("../../data/bbh/cot_fewshot.json");

/// The settings every task shares and each task's prompt parts.
#[derive(Clone, Debug, Deserialize)]
pub struct Spec {
    pub target_delimiter: String,
    pub until: Vec<String>,
    pub max_gen_toks: usize,
    pub num_fewshot: usize,
    /// By dataset name (`boolean_expressions`, …), sorted.
    pub tasks: BTreeMap<String, TaskSpec>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct TaskSpec {
    /// lm-eval's task name (`bbh_cot_fewshot_boolean_expressions`).
    pub task: String,
    pub description: String,
    /// "Q: {{input}}\nA: Let's think step by step.\n" in every task.
    pub doc_to_text: String,
    pub samples: Vec<Sample>,
}

/// An exemplar, or a test item (SaylorTwift/bbh's fields).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Sample {
    pub input: String,
    pub target: String,
}

const INPUT: &str = "{{input}}";

pub fn spec() -> Result<Spec, EvalError> {
    let s: Spec = serde_json::from_str(SPEC)
        .map_err(|e| EvalError::Invalid(format!("evals/data/bbh/cot_fewshot.json: {e}")))?;
    for (name, t) in &s.tasks {
        // The only template feature the prompts use; anything else would need a renderer.
        if t.doc_to_text.matches(INPUT).count() != 1 || t.doc_to_text.contains("{%") {
            return Err(EvalError::Invalid(format!(
                "bbh {name}: unexpected doc_to_text {:?}",
                t.doc_to_text
            )));
        }
    }
    Ok(s)
}

impl TaskSpec {
    fn doc_to_text(&self, input: &str) -> String {
        self.doc_to_text.replace(INPUT, input)
    }

    /// The description, the first `n` exemplars (lm-eval's `first_n` sampler) each followed by
    /// its target and "\n\n", then the question.
    pub fn prompt(&self, spec: &Spec, input: &str) -> String {
        let mut text = self.description.clone();
        for s in self.samples.iter().take(spec.num_fewshot) {
            text.push_str(&self.doc_to_text(&s.input));
            text.push_str(&spec.target_delimiter);
            text.push_str(&s.target);
            text.push_str("\n\n");
        }
        text.push_str(&self.doc_to_text(input));
        text
    }

    pub fn request(&self, spec: &Spec, input: &str) -> GenRequest {
        GenRequest {
            prompt: Prompt::Text(self.prompt(spec, input)),
            until: spec.until.clone(),
            max_gen_toks: spec.max_gen_toks,
            sampling: None,
            constraint: None,
        }
    }
}

/// One test question of one task.
#[derive(Clone, Debug)]
pub struct Item {
    /// The dataset name (`date_understanding`).
    pub task: String,
    /// 0-based within the task.
    pub index: usize,
    pub sample: Sample,
    /// 1-based line of DIR/<task>.jsonl.
    pub line: usize,
}

/// The items of `tasks` (all 27 when empty) from DIR/<task>.jsonl, tasks in name order, the
/// first `limit` of each (lm-eval's `--limit` applies per subtask).
pub fn load(
    spec: &Spec,
    dir: &Path,
    tasks: &[String],
    limit: Option<usize>,
) -> Result<Vec<Item>, EvalError> {
    for t in tasks {
        if !spec.tasks.contains_key(t) {
            let known: Vec<&str> = spec.tasks.keys().map(String::as_str).collect();
            return Err(EvalError::Invalid(format!(
                "unknown BBH task `{t}` (one of: {})",
                known.join(", ")
            )));
        }
    }
    let mut items = Vec::new();
    for name in spec.tasks.keys() {
        if !tasks.is_empty() && !tasks.contains(name) {
            continue;
        }
        let path = dir.join(format!("{name}.jsonl"));
        let rows = crate::jsonl::read_rows::<Sample>(&path)?;
        items.extend(
            rows.into_iter()
                .take(limit.unwrap_or(usize::MAX))
                .enumerate()
                .map(|(index, (line, sample))| Item {
                    task: name.clone(),
                    index,
                    sample,
                    line,
                }),
        );
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_holds_27_tasks_of_three_exemplars() {
        let s = spec().unwrap();
        assert_eq!(s.tasks.len(), 27);
        assert!(s.tasks.values().all(|t| t.samples.len() == 3));
        assert_eq!(s.until, ["</s>", "Q", "\n\n"]);
        let t = &s.tasks["boolean_expressions"];
        let p = t.prompt(&s, "True is");
        assert!(p.starts_with("Evaluate the result of a random Boolean expression.\n\nQ: "));
        assert!(p.ends_with("\n\nQ: True is\nA: Let's think step by step.\n"));
        assert_eq!(p.matches("A: Let's think step by step.\n").count(), 4);
    }
}
