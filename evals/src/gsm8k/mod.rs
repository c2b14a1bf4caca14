//! GSM8K as lm-evaluation-harness 0.4.13 runs it: the prompts, few-shot exemplars, stop
//! strings, generation length and scoring of its `gsm8k`, `gsm8k_cot`, `gsm8k_cot_zeroshot`
//! and `gsm8k_cot_llama` tasks, read from their yaml files (embedded as
//! `evals/data/gsm8k/lm_eval_tasks.json`, written by `scripts/gsm8k_lm_eval_data.py`).
//!
//! Two scores per item, as the harness reports them: `strict-match` (the variant's answer
//! format, `#### N` or `The answer is N.`) and `flexible-extract` (the last number in the
//! response), each compared with the reference answer after the yaml's `regexes_to_ignore`
//! and lower-casing ([`filter`]).
//!
//! Not the harness's: plain `gsm8k` samples 5 exemplars from the train split with a seeded
//! random sampler; there is no train split here, so it takes the first 5 rows of a
//! user-supplied file, or by default the first 5 chain-of-thought exemplars rewritten in the
//! train split's answer form (`...\n#### N`). See [`default_gsm8k_fewshot`].

pub mod filter;

use crate::{ChatMessage, EvalError, GenRequest, Prompt};
use filter::{ExactMatch, PySub, RegexFilter};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const TASKS_JSON: &str = include_str!("../../data/gsm8k/lm_eval_tasks.json");

/// The variants `pocket eval gsm8k --variant` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `gsm8k`: 5-shot "Question: …\nAnswer:", strict match on `#### N`.
    Gsm8k,
    /// `gsm8k_cot`: 8 fixed chain-of-thought exemplars, "Q: …\nA:", strict match on
    /// `The answer is N.`.
    Cot,
    /// `gsm8k_cot_zeroshot`: "Q: …\nA: Let's think step by step.".
    CotZeroshot,
    /// `gsm8k_cot_llama` run as the harness runs it with `--apply_chat_template
    /// --fewshot_as_multiturn`: the 8 exemplars as user/assistant turns through the model's
    /// chat template, strict match on `The final answer is N`.
    Chat,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Gsm8k,
        Variant::Cot,
        Variant::CotZeroshot,
        Variant::Chat,
    ];

    /// The name users type and result files carry.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Gsm8k => "gsm8k",
            Variant::Cot => "gsm8k_cot",
            Variant::CotZeroshot => "gsm8k_cot_zeroshot",
            Variant::Chat => "chat",
        }
    }

    /// The lm-eval task whose yaml defines the variant.
    pub fn lm_eval_task(self) -> &'static str {
        match self {
            Variant::Chat => "gsm8k_cot_llama",
            other => other.name(),
        }
    }

    pub fn parse(name: &str) -> Option<Variant> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == name || v.lm_eval_task() == name)
    }
}

/// One few-shot exemplar: a question and the answer text the model is shown.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Exemplar {
    pub question: String,
    pub target: String,
}

#[derive(Debug, Deserialize)]
struct FilterDef {
    regex_pattern: String,
    group_select: i64,
}

/// One task's yaml, as data.
#[derive(Debug, Deserialize)]
struct TaskDef {
    task: String,
    doc_to_text: String,
    doc_to_target: String,
    target_delimiter: String,
    fewshot_delimiter: String,
    num_fewshot: usize,
    fewshot_samples: Vec<Exemplar>,
    until: Vec<String>,
    max_gen_toks: usize,
    filters: BTreeMap<String, FilterDef>,
    ignore_case: bool,
    ignore_punctuation: bool,
    regexes_to_ignore: Vec<String>,
}

#[derive(Deserialize)]
struct TasksFile {
    tasks: BTreeMap<String, TaskDef>,
}

/// A task ready to build prompts and score responses.
#[derive(Debug)]
pub struct Task {
    pub variant: Variant,
    def: TaskDef,
    strict: RegexFilter,
    flexible: RegexFilter,
    exact: ExactMatch,
}

/// How the reference answer is taken from a GSM8K `answer` field.
const TARGET_FULL: &str = "{{answer}}";
const TARGET_AFTER_HASHES: &str =
    "{{answer.split('####')[-1].strip() if answer is defined else target}}";

impl Task {
    fn build(variant: Variant, def: TaskDef) -> Result<Task, String> {
        let filter = |name: &str| -> Result<RegexFilter, String> {
            let f = def
                .filters
                .get(name)
                .ok_or_else(|| format!("{}: no {name} filter", def.task))?;
            RegexFilter::new(&f.regex_pattern, f.group_select)
        };
        if def.doc_to_text.matches("{{").count() != 1 || !def.doc_to_text.contains("{{question}}") {
            return Err(format!("{}: unsupported doc_to_text template", def.task));
        }
        if def.doc_to_target != TARGET_FULL && def.doc_to_target != TARGET_AFTER_HASHES {
            return Err(format!("{}: unsupported doc_to_target template", def.task));
        }
        let exact = ExactMatch {
            ignore: def
                .regexes_to_ignore
                .iter()
                .map(|p| PySub::new(p))
                .collect::<Result<_, _>>()?,
            ignore_case: def.ignore_case,
            ignore_punctuation: def.ignore_punctuation,
        };
        Ok(Task {
            variant,
            strict: filter("strict-match")?,
            flexible: filter("flexible-extract")?,
            exact,
            def,
        })
    }

    /// The embedded task definition of `variant`.
    pub fn get(variant: Variant) -> Result<&'static Task, EvalError> {
        static TASKS: OnceLock<Result<Vec<Task>, String>> = OnceLock::new();
        let tasks = TASKS
            .get_or_init(|| {
                let mut file: TasksFile =
                    serde_json::from_str(TASKS_JSON).map_err(|e| e.to_string())?;
                Variant::ALL
                    .into_iter()
                    .map(|v| {
                        let def = file
                            .tasks
                            .remove(v.lm_eval_task())
                            .ok_or_else(|| format!("no task {}", v.lm_eval_task()))?;
                        Task::build(v, def)
                    })
                    .collect()
            })
            .as_ref()
            .map_err(|e| EvalError::Invalid(format!("embedded GSM8K task data: {e}")))?;
        tasks
            .iter()
            .find(|t| t.variant == variant)
            .ok_or_else(|| EvalError::Invalid(format!("no task {}", variant.name())))
    }

    /// lm-eval's task name and version-free identity, e.g. `gsm8k_cot_llama`.
    pub fn lm_eval_name(&self) -> &str {
        &self.def.task
    }

    pub fn num_fewshot(&self) -> usize {
        self.def.num_fewshot
    }

    pub fn max_gen_toks(&self) -> usize {
        self.def.max_gen_toks
    }

    pub fn until(&self) -> &[String] {
        &self.def.until
    }

    /// The yaml's own exemplars (`fewshot_config.samples`; empty for `gsm8k` and
    /// `gsm8k_cot_zeroshot`).
    pub fn yaml_exemplars(&self) -> &[Exemplar] {
        &self.def.fewshot_samples
    }

    /// `doc_to_text` for a question.
    pub fn doc_to_text(&self, question: &str) -> String {
        self.def.doc_to_text.replace("{{question}}", question)
    }

    /// `doc_to_target` for a GSM8K `answer` field: the whole answer (its `#### N` is removed
    /// by the ignore patterns when comparing) or the text after the last `####`.
    pub fn doc_to_target(&self, answer: &str) -> String {
        if self.def.doc_to_target == TARGET_FULL {
            answer.to_string()
        } else {
            let last = answer.rsplit("####").next().unwrap_or(answer);
            crate::ifeval::pytext::strip(last).to_string()
        }
    }

    /// The request for one question with the given exemplars (the first `num_fewshot` are
    /// used, in order), as `fewshot_context` builds it: each exemplar is question, target
    /// delimiter, answer, few-shot delimiter; the chat variant makes them turns instead.
    pub fn request(&self, question: &str, exemplars: &[Exemplar]) -> GenRequest {
        let shots = &exemplars[..self.def.num_fewshot.min(exemplars.len())];
        let prompt = if self.variant == Variant::Chat {
            let mut messages = Vec::new();
            for s in shots {
                messages.push(ChatMessage::new("user", &self.doc_to_text(&s.question)));
                messages.push(ChatMessage::new("assistant", &s.target));
            }
            messages.push(ChatMessage::new("user", &self.doc_to_text(question)));
            Prompt::Chat(messages)
        } else {
            let mut text = String::new();
            for s in shots {
                text.push_str(&self.doc_to_text(&s.question));
                text.push_str(&self.def.target_delimiter);
                text.push_str(&s.target);
                text.push_str(&self.def.fewshot_delimiter);
            }
            text.push_str(&self.doc_to_text(question));
            Prompt::Text(text)
        };
        GenRequest {
            prompt,
            until: self.def.until.clone(),
            max_gen_toks: self.def.max_gen_toks,
            sampling: None,
            constraint: None,
        }
    }

    /// Both filters and both verdicts for one response to a problem whose GSM8K `answer` is
    /// `answer`.
    pub fn score(&self, response: &str, answer: &str) -> Verdict {
        let target = self.doc_to_target(answer);
        let strict = self.strict.apply(response);
        let flexible = self.flexible.apply(response);
        Verdict {
            strict_match: self.exact.matches(&strict, &target),
            flexible_extract: self.exact.matches(&flexible, &target),
            strict,
            flexible,
        }
    }
}

/// The outcome of one response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// What the strict filter extracted (`[invalid]` when nothing matched).
    pub strict: String,
    pub flexible: String,
    pub strict_match: bool,
    pub flexible_extract: bool,
}

impl Verdict {
    /// The scores reports average and `compare` pairs: `strict_match` and
    /// `flexible_extract`, 0 or 1.
    pub fn item_scores(&self, id: serde_json::Value) -> crate::results::ItemScores {
        let bit = |b: bool| serde_json::Value::from(u8::from(b));
        crate::results::ItemScores {
            id,
            scores: [
                ("strict_match".to_string(), bit(self.strict_match)),
                ("flexible_extract".to_string(), bit(self.flexible_extract)),
            ]
            .into(),
            instruction_id_list: None,
        }
    }
}

/// One GSM8K problem.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Problem {
    pub question: String,
    /// The worked answer ending in `#### N`.
    pub answer: String,
}

/// Reads GSM8K jsonl (`{"question", "answer"}` per line, as OpenAI's `test.jsonl`).
pub fn load_problems(path: impl AsRef<Path>) -> Result<Vec<Problem>, EvalError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: Problem = serde_json::from_str(line).map_err(|e| EvalError::Data {
            path: path.to_owned(),
            line: i + 1,
            message: format!("expected {{\"question\": str, \"answer\": str}}: {e}"),
        })?;
        problems.push(p);
    }
    if problems.is_empty() {
        return Err(EvalError::Invalid(format!(
            "{}: no problems",
            path.display()
        )));
    }
    Ok(problems)
}

/// Few-shot exemplars from GSM8K rows (a train split): the row's whole answer is the target,
/// as `doc_to_target: "{{answer}}"` shows it.
pub fn exemplars_from_problems(rows: &[Problem]) -> Vec<Exemplar> {
    rows.iter()
        .map(|p| Exemplar {
            question: p.question.clone(),
            target: p.answer.clone(),
        })
        .collect()
}

/// The default exemplars of plain `gsm8k` when no train split is given: `gsm8k_cot`'s
/// chain-of-thought exemplars with their closing "The answer is N." rewritten as the train
/// split's "\n#### N", so the model still sees the `#### N` form strict-match looks for.
pub fn default_gsm8k_fewshot() -> Result<Vec<Exemplar>, EvalError> {
    const CLOSE: &str = " The answer is ";
    Task::get(Variant::Cot)?
        .yaml_exemplars()
        .iter()
        .map(|e| {
            let at = e.target.rfind(CLOSE).ok_or_else(|| {
                EvalError::Invalid(format!("exemplar without {CLOSE:?}: {}", e.target))
            })?;
            let number = e.target[at + CLOSE.len()..].trim_end_matches('.');
            Ok(Exemplar {
                question: e.question.clone(),
                target: format!("{}\n#### {number}", &e.target[..at]),
            })
        })
        .collect()
}

/// The exemplars a variant uses: its yaml's, or for plain `gsm8k` the given train rows (first
/// five) or [`default_gsm8k_fewshot`].
pub fn exemplars_for(
    variant: Variant,
    train: Option<&[Problem]>,
) -> Result<Vec<Exemplar>, EvalError> {
    let task = Task::get(variant)?;
    match (variant, train) {
        (Variant::Gsm8k, Some(rows)) => Ok(exemplars_from_problems(rows)),
        (Variant::Gsm8k, None) => default_gsm8k_fewshot(),
        _ => Ok(task.yaml_exemplars().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_builds_from_the_embedded_yaml_data() {
        for v in Variant::ALL {
            let t = Task::get(v).unwrap();
            assert_eq!(t.lm_eval_name(), v.lm_eval_task());
            assert_eq!(t.max_gen_toks(), 256);
            assert_eq!(Variant::parse(v.name()), Some(v));
        }
        assert_eq!(Task::get(Variant::Cot).unwrap().yaml_exemplars().len(), 8);
        assert_eq!(Task::get(Variant::Chat).unwrap().num_fewshot(), 8);
        assert_eq!(Task::get(Variant::Gsm8k).unwrap().num_fewshot(), 5);
    }

    #[test]
    fn plain_prompt_layout() {
        let t = Task::get(Variant::Gsm8k).unwrap();
        let shots = vec![
            Exemplar {
                question: "Q1?".into(),
                target: "A1\n#### 1".into(),
            };
            6
        ];
        let r = t.request("Q?", &shots);
        let one = "Question: Q1?\nAnswer: A1\n#### 1\n\n";
        assert_eq!(
            r.prompt,
            Prompt::Text(one.repeat(5) + "Question: Q?\nAnswer:")
        );
        assert_eq!(r.until, ["Question:", "</s>", "<|im_end|>"]);
    }

    #[test]
    fn default_fewshot_uses_the_train_answer_form() {
        let d = default_gsm8k_fewshot().unwrap();
        assert_eq!(d.len(), 8);
        assert!(
            d[0].target.ends_with("21 - 15 = 6.\n#### 6"),
            "{}",
            d[0].target
        );
        assert!(
            d[5].target.ends_with("9 + 20 is 29.\n#### 29"),
            "{}",
            d[5].target
        );
    }

    #[test]
    fn targets_follow_doc_to_target() {
        let answer = "She makes 9 * 2 = $<<9*2=18>>18.\n#### 1,018";
        let v = Task::get(Variant::Gsm8k)
            .unwrap()
            .score("#### 1018", answer);
        assert!(v.strict_match && v.flexible_extract, "{v:?}");
        let cot = Task::get(Variant::Cot).unwrap();
        assert_eq!(cot.doc_to_target(answer), "1,018");
        let v = cot.score("So 1,018 total. The answer is 1018.", answer);
        assert!(v.strict_match && v.flexible_extract, "{v:?}");
    }
}
