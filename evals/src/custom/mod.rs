//! Custom tasks on a user's own samples: a task file ([`spec`]) names the rows, a minijinja
//! prompt and target over a row's fields, few-shot rows, how to read the answer
//! ([`extract`]) and the metric ([`metric`]). Every template is checked against every row
//! before the model runs, so a wrong column is one error naming the file, line and field.

pub mod extract;
pub mod metric;
pub mod rows;
pub mod spec;

use crate::results::ItemScores;
use crate::{AnswerConstraint, ChatMessage, EvalError, GenRequest, Prompt, Sampling};
use minijinja::{Environment, UndefinedBehavior};
use rows::Row;
use serde_json::{json, Map, Value};
use spec::Constrain;
use spec::TaskSpec;
use std::path::{Path, PathBuf};

pub struct CustomTask {
    pub spec: TaskSpec,
    pub path: PathBuf,
    /// The rows scored.
    pub rows: Vec<Row>,
    shots: Vec<Row>,
    env: Environment<'static>,
}

/// What one response came to: the log line's extra fields and the item's scores.
pub struct Outcome {
    pub scores: ItemScores,
    pub extra: Map<String, Value>,
    pub f1: Option<f64>,
}

impl CustomTask {
    pub fn load(path: &Path) -> Result<CustomTask, EvalError> {
        let spec = TaskSpec::load(path)?;
        let mut rows = rows::load_rows(&spec.data)?;
        let shots = match &spec.fewshot_data {
            Some(p) => {
                let all = rows::load_rows(p)?;
                if all.len() < spec.fewshot {
                    return Err(EvalError::Invalid(format!(
                        "{}: `fewshot: {}` but {} has {} rows",
                        path.display(),
                        spec.fewshot,
                        p.display(),
                        all.len()
                    )));
                }
                all.into_iter().take(spec.fewshot).collect()
            }
            None => {
                if rows.len() <= spec.fewshot {
                    return Err(EvalError::Invalid(format!(
                        "{}: `fewshot: {}` takes the first rows of {}, which leaves none to score",
                        path.display(),
                        spec.fewshot,
                        spec.data.display()
                    )));
                }
                rows.drain(..spec.fewshot).collect()
            }
        };
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        for (name, source) in [("prompt", &spec.prompt), ("target", &spec.target)] {
            env.add_template_owned(name.to_string(), source.clone())
                .map_err(|e| EvalError::Invalid(format!("{}: `{name}`: {e}", path.display())))?;
        }
        if let Some(system) = &spec.system {
            env.add_template_owned("system".to_string(), system.clone())
                .map_err(|e| EvalError::Invalid(format!("{}: `system`: {e}", path.display())))?;
        }
        let task = CustomTask {
            path: path.to_path_buf(),
            spec,
            rows,
            shots,
            env,
        };
        let data_of = |shot: bool| {
            if shot {
                task.spec
                    .fewshot_data
                    .clone()
                    .unwrap_or(task.spec.data.clone())
            } else {
                task.spec.data.clone()
            }
        };
        for (shot, row) in task
            .shots
            .iter()
            .map(|r| (true, r))
            .chain(task.rows.iter().map(|r| (false, r)))
        {
            task.check_row(row, &data_of(shot))?;
        }
        Ok(task)
    }

    /// Every template renders for `row`, and names only fields the row has.
    fn check_row(&self, row: &Row, data: &Path) -> Result<(), EvalError> {
        for name in ["prompt", "target", "system"] {
            let Ok(t) = self.env.get_template(name) else {
                continue;
            };
            for var in t.undeclared_variables(false) {
                if var != "choices" && !row.fields.contains_key(&var) {
                    let have: Vec<&str> = row.fields.keys().map(String::as_str).collect();
                    return Err(EvalError::Data {
                        path: data.to_path_buf(),
                        line: row.line,
                        message: format!(
                            "the task's `{name}` uses `{var}`, which this row does not have (it has: {})",
                            have.join(", ")
                        ),
                    });
                }
            }
            self.render(name, row).map_err(|e| EvalError::Data {
                path: data.to_path_buf(),
                line: row.line,
                message: format!("rendering the task's `{name}`: {e}"),
            })?;
        }
        Ok(())
    }

    fn render(&self, name: &str, row: &Row) -> Result<String, EvalError> {
        let mut ctx = row.fields.clone();
        ctx.insert("choices".into(), json!(self.spec.choices));
        self.env
            .get_template(name)
            .and_then(|t| {
                t.render(minijinja::Value::from(minijinja::value::Serde(
                    Value::Object(ctx),
                )))
            })
            .map_err(|e| EvalError::Invalid(format!("`{name}`: {e}")))
    }

    /// The generation request for scored row `i`.
    pub fn request(&self, i: usize) -> Result<GenRequest, EvalError> {
        let row = &self.rows[i];
        let system = match self.spec.system {
            Some(_) => Some(self.render("system", row)?),
            None => None,
        };
        let prompt = if self.spec.chat_template {
            let mut messages = Vec::new();
            if let Some(s) = &system {
                messages.push(ChatMessage::new("system", s));
            }
            for shot in &self.shots {
                messages.push(ChatMessage::new("user", &self.render("prompt", shot)?));
                messages.push(ChatMessage::new("assistant", &self.render("target", shot)?));
            }
            messages.push(ChatMessage::new("user", &self.render("prompt", row)?));
            Prompt::Chat(messages)
        } else {
            let mut text = system.map(|s| s + "\n\n").unwrap_or_default();
            for shot in &self.shots {
                let q = self.render("prompt", shot)?;
                let gap = if q.ends_with(char::is_whitespace) {
                    ""
                } else {
                    " "
                };
                text.push_str(&format!(
                    "{q}{gap}{}{}",
                    self.render("target", shot)?,
                    self.spec.fewshot_separator
                ));
            }
            text.push_str(&self.render("prompt", row)?);
            Prompt::Text(text)
        };
        Ok(GenRequest {
            prompt,
            until: self.spec.generation.stop.clone(),
            max_gen_toks: self.spec.generation.max_tokens,
            sampling: self.sampling(i),
            constraint: self.constraint()?,
        })
    }

    /// Item `i`'s sampling (None: greedy): the task's seed mixed with the item's row, so each
    /// item draws its own numbers and the same ones in any run.
    pub fn sampling(&self, i: usize) -> Option<Sampling> {
        let (temperature, top_p, seed) = self.spec.generation.sampling()?;
        Some(Sampling {
            temperature,
            top_p,
            seed: seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        })
    }

    /// `generation.constrain` as the engine takes it (a schema file already read).
    pub fn constraint(&self) -> Result<Option<AnswerConstraint>, EvalError> {
        let Some(c) = self.spec.generation.constrain.as_ref() else {
            return Ok(None);
        };
        Ok(Some(match c {
            Constrain::Choices => AnswerConstraint::Choices(self.spec.choices.clone()),
            Constrain::JsonSchema(s) => AnswerConstraint::JsonSchema(s.clone()),
            Constrain::JsonSchemaFile(f) => {
                return Err(EvalError::Invalid(format!(
                    "{}: the schema file {} was not read (load the task with TaskSpec::load)",
                    self.path.display(),
                    f.display()
                )))
            }
            Constrain::Regex(r) => AnswerConstraint::Regex(r.clone()),
            Constrain::Grammar(g) => AnswerConstraint::Grammar(g.clone()),
        }))
    }

    /// An item's id: the row's `id` field if it has one, else its line in the data file.
    pub fn id(&self, i: usize) -> Value {
        let row = &self.rows[i];
        row.fields
            .get("id")
            .cloned()
            .unwrap_or_else(|| json!(format!("line {}", row.line)))
    }

    pub fn score(&self, i: usize, response: &str) -> Result<Outcome, EvalError> {
        let row = &self.rows[i];
        let target = self.render("target", row)?;
        let s = &self.spec;
        let answer = extract::extract(&s.extract, response, &s.choices, &s.normalize);
        let scored = metric::score(s.metric, answer.as_deref(), &target, &s.normalize);
        let mut extra = Map::new();
        extra.insert("answer".into(), json!(answer));
        extra.insert("target".into(), json!(target));
        if let Some(f1) = scored.f1 {
            extra.insert("token_f1".into(), json!(f1));
        }
        Ok(Outcome {
            scores: ItemScores {
                id: self.id(i),
                scores: scored.scores.into_iter().collect(),
                instruction_id_list: None,
            },
            extra,
            f1: scored.f1,
        })
    }

    /// The headline metric's name.
    pub fn headline(&self) -> &'static str {
        match self.spec.metric {
            spec::Metric::ExactMatch | spec::Metric::TokenF1 => "exact_match",
            spec::Metric::Accuracy => "accuracy",
            spec::Metric::JsonFields => "field_accuracy",
        }
    }
}
