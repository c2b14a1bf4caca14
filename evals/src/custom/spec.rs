//! A custom task file (YAML or JSON): what to ask, of which rows, how to read the answer and how
//! to score it. Documented field by field in docs/evals.md#custom-tasks.

use crate::EvalError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Names the task in reports and logs.
    pub name: String,
    /// The rows: `.jsonl` (one object per line) or `.csv` (header row); relative to the task file.
    pub data: PathBuf,
    /// A minijinja template over a row's fields: the question.
    pub prompt: String,
    /// The gold answer: a template over the row (e.g. "{{ intent }}").
    pub target: String,
    /// Through the model's chat template (default), or as plain text.
    #[serde(default = "yes")]
    pub chat_template: bool,
    /// A system message (chat only).
    #[serde(default)]
    pub system: Option<String>,
    /// Rows shown as solved examples before each question: from `fewshot_data` if given,
    /// else the first rows of `data` (which are then not scored).
    #[serde(default)]
    pub fewshot: usize,
    #[serde(default)]
    pub fewshot_data: Option<PathBuf>,
    /// Text between an example's answer and what follows (plain-text prompts).
    #[serde(default = "blank_line")]
    pub fewshot_separator: String,
    /// Labels the answer must be one of (`{{ choices }}` in templates); with `extract: choices`
    /// the answer is the label it names.
    #[serde(default)]
    pub choices: Vec<String>,
    /// How the model's text becomes an answer: `first_line` (default), `whole`, `json`,
    /// `choices`, `{regex: PATTERN}` or `{json_field: a.b.0}`.
    #[serde(default, deserialize_with = "extract_rule")]
    pub extract: Extract,
    /// How an answer is compared with the target.
    pub metric: Metric,
    /// Applied to answer and target before exact match, labels and token F1.
    #[serde(default)]
    pub normalize: Normalize,
    #[serde(default)]
    pub generation: Generation,
}

/// `extract` as a task file writes it: a rule's name, or a one-key map for the rules that
/// take an argument (YAML and JSON alike).
fn extract_rule<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Extract, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Name(String),
        Map(std::collections::BTreeMap<String, String>),
    }
    const HELP: &str =
        "expected first_line, whole, json, choices, {regex: PATTERN} or {json_field: PATH}";
    match Repr::deserialize(d).map_err(|_| D::Error::custom(HELP))? {
        Repr::Name(n) => match n.as_str() {
            "first_line" => Ok(Extract::FirstLine),
            "whole" => Ok(Extract::Whole),
            "json" => Ok(Extract::Json),
            "choices" => Ok(Extract::Choices),
            other => Err(D::Error::custom(format!("`{other}`: {HELP}"))),
        },
        Repr::Map(m) if m.len() == 1 => {
            let (k, v) = m.into_iter().next().unwrap_or_default();
            match k.as_str() {
                "regex" => Ok(Extract::Regex(v)),
                "json_field" => Ok(Extract::JsonField(v)),
                other => Err(D::Error::custom(format!("`{other}`: {HELP}"))),
            }
        }
        Repr::Map(_) => Err(D::Error::custom(HELP)),
    }
}

fn yes() -> bool {
    true
}

fn blank_line() -> String {
    "\n\n".into()
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum Extract {
    /// The first non-empty line, trimmed (the default).
    #[default]
    FirstLine,
    /// The whole answer, trimmed.
    Whole,
    /// The first match of a regex; its first capture group if it has one.
    Regex(String),
    /// A field of the JSON object in the answer (`a.b.0.c`), as text; the first `{…}` in the
    /// answer is parsed.
    JsonField(String),
    /// The JSON object in the answer (for the `json_fields` metric).
    Json,
    /// The label among `choices` the answer names: an exact match after normalisation, else
    /// the label that occurs earliest in it.
    Choices,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// 1 when answer equals target after normalisation.
    ExactMatch,
    /// 1 when the extracted label equals the target label (needs `choices`).
    Accuracy,
    /// SQuAD's token F1 between answer and target (reported as a mean, and as exact match).
    TokenF1,
    /// Per field of the target JSON object (the target template renders JSON): whether the
    /// answer's object has the same value; the score is the share of fields over all rows.
    JsonFields,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Normalize {
    #[serde(default = "yes")]
    pub lowercase: bool,
    #[serde(default = "yes")]
    pub strip: bool,
    #[serde(default)]
    pub remove_punctuation: bool,
    #[serde(default = "yes")]
    pub collapse_whitespace: bool,
    /// SQuAD's: drop the words "a", "an", "the".
    #[serde(default)]
    pub remove_articles: bool,
}

impl Default for Normalize {
    fn default() -> Normalize {
        Normalize {
            lowercase: true,
            strip: true,
            remove_punctuation: false,
            collapse_whitespace: true,
            remove_articles: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// Stop strings (the model's end of turn always stops; they do not apply under
    /// `constrain`, where the constraint decides where the answer ends).
    #[serde(default)]
    pub stop: Vec<String>,
    /// The answer's shape, enforced while decoding: `choices` (the task's labels),
    /// `{json_schema: SCHEMA or FILE.json}`, `{regex: PATTERN}` or `{grammar: LARK or GBNF}`.
    #[serde(default, deserialize_with = "constrain_rule")]
    pub constrain: Option<Constrain>,
    /// Sampling temperature: 0 (the default) decodes greedily; above 0 each answer is sampled,
    /// with `top_p` (default 1) and `seed` (default 0). Item draws come from the seed and the
    /// item's row, so an answer does not depend on `--limit`, the batch or a resume.
    #[serde(default)]
    pub temperature: f32,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<u64>,
}

/// `generation.constrain` as written; a schema file is read by [`TaskSpec::load`].
#[derive(Clone, Debug, PartialEq)]
pub enum Constrain {
    /// The task's `choices`, exactly one of them.
    Choices,
    /// A JSON schema written inline.
    JsonSchema(serde_json::Value),
    /// A JSON schema in a file, relative to the task file (read at load).
    JsonSchemaFile(PathBuf),
    Regex(String),
    Grammar(String),
}

fn constrain_rule<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Constrain>, D::Error> {
    use serde::de::Error;
    const HELP: &str =
        "expected choices, {json_schema: SCHEMA or FILE}, {regex: PATTERN} or {grammar: TEXT}";
    let v = serde_json::Value::deserialize(d)?;
    let rule = match v {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(n) if n == "choices" => Constrain::Choices,
        serde_json::Value::Object(m) if m.len() == 1 => {
            let (k, v) = m.into_iter().next().unwrap_or_default();
            match (k.as_str(), v) {
                ("json_schema", serde_json::Value::String(file)) => {
                    Constrain::JsonSchemaFile(file.into())
                }
                ("json_schema", schema @ serde_json::Value::Object(_)) => {
                    Constrain::JsonSchema(schema)
                }
                ("json_schema", _) => {
                    return Err(D::Error::custom(
                        "`json_schema` takes a schema (a mapping) or a file name",
                    ))
                }
                ("regex", serde_json::Value::String(r)) => Constrain::Regex(r),
                ("grammar", serde_json::Value::String(g)) => Constrain::Grammar(g),
                (other, _) => return Err(D::Error::custom(format!("`{other}`: {HELP}"))),
            }
        }
        _ => return Err(D::Error::custom(HELP)),
    };
    Ok(Some(rule))
}

fn default_max_tokens() -> usize {
    128
}

impl Generation {
    /// `(temperature, top_p, seed)` with their defaults filled in when the task samples;
    /// None when it decodes greedily.
    pub fn sampling(&self) -> Option<(f32, f32, u64)> {
        (self.temperature > 0.0).then(|| {
            (
                self.temperature,
                self.top_p.unwrap_or(1.0),
                self.seed.unwrap_or(0),
            )
        })
    }
}

impl Default for Generation {
    fn default() -> Generation {
        Generation {
            max_tokens: default_max_tokens(),
            stop: Vec::new(),
            constrain: None,
            temperature: 0.0,
            top_p: None,
            seed: None,
        }
    }
}

impl TaskSpec {
    /// Reads a task file: JSON when it ends in `.json`, YAML otherwise. Paths in it are made
    /// relative to the file's directory.
    pub fn load(path: &Path) -> Result<TaskSpec, EvalError> {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let mut spec: TaskSpec = if json {
            serde_json::from_str(&text).map_err(|e| EvalError::Data {
                path: path.to_path_buf(),
                line: e.line(),
                message: e.to_string(),
            })?
        } else {
            serde_yaml_ng::from_str(&text).map_err(|e| EvalError::Data {
                path: path.to_path_buf(),
                line: e.location().map_or(0, |l| l.line()),
                message: e.to_string(),
            })?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        spec.data = dir.join(&spec.data);
        spec.fewshot_data = spec.fewshot_data.map(|p| dir.join(p));
        if let Some(Constrain::JsonSchemaFile(f)) = &spec.generation.constrain {
            let file = dir.join(f);
            let text = std::fs::read_to_string(&file).map_err(|source| EvalError::Io {
                path: file.clone(),
                source,
            })?;
            let schema = serde_json::from_str(&text).map_err(|e| EvalError::Data {
                path: file.clone(),
                line: e.line(),
                message: format!("the JSON schema of `generation.constrain`: {e}"),
            })?;
            spec.generation.constrain = Some(Constrain::JsonSchema(schema));
        }
        spec.check(path)?;
        Ok(spec)
    }

    fn check(&self, path: &Path) -> Result<(), EvalError> {
        let bad = |message: String| EvalError::Invalid(format!("{}: {message}", path.display()));
        if self.name.trim().is_empty() {
            return Err(bad("`name` is empty".into()));
        }
        if self.generation.max_tokens == 0 {
            return Err(bad("`generation.max_tokens` must be at least 1".into()));
        }
        let needs_choices = self.metric == Metric::Accuracy || self.extract == Extract::Choices;
        if needs_choices && self.choices.is_empty() {
            return Err(bad(
                "`metric: accuracy` and `extract: choices` need `choices`".into(),
            ));
        }
        if self.metric == Metric::JsonFields && self.extract != Extract::Json {
            return Err(bad("`metric: json_fields` needs `extract: json`".into()));
        }
        let g = &self.generation;
        if !(g.temperature.is_finite() && (0.0..=100.0).contains(&g.temperature)) {
            return Err(bad(format!(
                "`generation.temperature` must be 0 (greedy) to 100, not {}",
                g.temperature
            )));
        }
        if let Some(p) = g.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(bad(format!(
                    "`generation.top_p` must be above 0 and at most 1, not {p}"
                )));
            }
        }
        if g.temperature == 0.0 && (g.top_p.is_some() || g.seed.is_some()) {
            return Err(bad(
                "`generation.top_p` and `generation.seed` sample: they need `temperature` above 0"
                    .into(),
            ));
        }
        if self.generation.constrain == Some(Constrain::Choices) && self.choices.is_empty() {
            return Err(bad("`generation.constrain: choices` needs `choices`".into()));
        }
        if let Extract::Regex(r) = &self.extract {
            regex::Regex::new(r).map_err(|e| bad(format!("`extract.regex`: {e}")))?;
        }
        Ok(())
    }
}
