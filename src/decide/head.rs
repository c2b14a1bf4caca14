//! Decision heads: what `pocket decide fit` writes and `decide --head` / `serve --head` read.
//!
//! One safetensors file. Its metadata says which readout and prompt order it was fitted for,
//! the fitted temperatures (`temperature.<type>[.<bucket>]`, as llama.cpp's GGUF keys), and
//! the hidden size it fits. Its tensors, when any:
//! - **pointer** (the Dec / llama.cpp `kev` layout): `q.weight` `[d, hidden]`, `q.bias` `[d]`,
//!   `k.weight`, `k.bias`. An option's score is `(q·h_last + q_b) · (k·h_marker + k_b) / √d`,
//!   with `h` the final-normed hidden states.
//! - **probe**: `probe.weight` `[classes, hidden]`, `probe.bias` `[classes]` over the last
//!   position's hidden state, for the one question it was trained on (`question` in the
//!   metadata; another question is refused).
//!
//! Sizes come from the file and are checked against each other and the model before use.

use super::answer::Temperatures;
use super::render::{Order, Style};
use super::request::Question;
use crate::Error;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The head file's marker in its metadata.
pub const FORMAT: &str = "pocket-decision-head";

/// A head an HF checkpoint directory carries beside its weights (a decision model shipped as
/// the base plus its head): loaded when no `--head` or readout is given.
pub const IN_CHECKPOINT: &str = "decision_head.safetensors";

#[derive(Clone, Debug, PartialEq)]
pub enum Weights {
    /// Temperatures only (a zero-shot readout calibrated).
    None,
    Pointer {
        dim: usize,
        q_w: Vec<f32>,
        q_b: Vec<f32>,
        k_w: Vec<f32>,
        k_b: Vec<f32>,
    },
    Probe {
        classes: Vec<String>,
        w: Vec<f32>,
        b: Vec<f32>,
        /// The question it answers: type, instructions and criteria as the request gave them.
        question: Value,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Head {
    pub style: Style,
    pub order: Order,
    /// Choice questions were asked in both option orders.
    pub reverse: bool,
    pub hidden: usize,
    pub temperatures: Temperatures,
    pub weights: Weights,
    /// Free-form notes (`fit`'s metrics, the model it was fitted on).
    pub notes: BTreeMap<String, String>,
}

/// A question's identity for a probe: its type, instructions and criteria.
pub fn question_signature(q: &Question) -> Value {
    let criteria: Value = match q.kind {
        super::request::Kind::Choice => Value::Object(
            q.options
                .iter()
                .map(|o| (o.key.clone(), o.description.clone()))
                .collect(),
        ),
        super::request::Kind::Score => {
            Value::Array(q.options.iter().map(|o| o.description.clone()).collect())
        }
        super::request::Kind::Noul => Value::Object(
            q.options
                .iter()
                .map(|o| (o.key.clone(), o.description.clone()))
                .collect(),
        ),
    };
    json!({"type": q.kind.name(), "instructions": q.instructions, "criteria": criteria})
}

impl Head {
    /// Raw pointer scores: the last position's query against each marker's key.
    pub fn pointer_scores(&self, last: &[f32], markers: &[&[f32]]) -> Result<Vec<f64>, Error> {
        let Weights::Pointer {
            dim,
            q_w,
            q_b,
            k_w,
            k_b,
        } = &self.weights
        else {
            return Err(Error::Invalid(
                "a pointer readout needs a pointer head".into(),
            ));
        };
        let project = |w: &[f32], b: &[f32], x: &[f32]| -> Vec<f64> {
            (0..*dim)
                .map(|r| {
                    let row = &w[r * x.len()..(r + 1) * x.len()];
                    row.iter()
                        .zip(x)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        + b[r] as f64
                })
                .collect()
        };
        let q = project(q_w, q_b, last);
        let scale = (*dim as f64).sqrt();
        Ok(markers
            .iter()
            .map(|m| {
                let k = project(k_w, k_b, m);
                q.iter().zip(&k).map(|(a, b)| a * b).sum::<f64>() / scale
            })
            .collect())
    }

    /// Raw probe scores for `keys` (the question's options, in shown order).
    pub fn probe_scores(&self, last: &[f32], keys: &[String]) -> Result<Vec<f64>, Error> {
        let Weights::Probe { classes, w, b, .. } = &self.weights else {
            return Err(Error::Invalid("a probe readout needs a probe head".into()));
        };
        let h = last.len();
        let logit = |c: usize| -> f64 {
            w[c * h..(c + 1) * h]
                .iter()
                .zip(last)
                .map(|(&a, &x)| a as f64 * x as f64)
                .sum::<f64>()
                + b[c] as f64
        };
        keys.iter()
            .map(|k| {
                classes
                    .iter()
                    .position(|c| c == k)
                    .map(logit)
                    .ok_or_else(|| Error::Invalid(format!("the probe head has no class {k:?}")))
            })
            .collect()
    }

    /// Refuses a question this head cannot answer (a probe trained on another question).
    pub fn check_question(&self, q: &Question) -> Result<(), Error> {
        if let Weights::Probe { question, .. } = &self.weights {
            if &question_signature(q) != question {
                return Err(Error::Invalid(format!(
                    "question {:?}: this probe head was trained on another question ({}); it \
                     answers only that one, with the same instructions and criteria",
                    q.name,
                    short(question)
                )));
            }
        }
        Ok(())
    }

    pub fn kind_name(&self) -> &'static str {
        match self.weights {
            Weights::None => "temperature",
            Weights::Pointer { .. } => "pointer",
            Weights::Probe { .. } => "probe",
        }
    }

    /// Writes the head (atomically: a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let mut meta: HashMap<String, String> = HashMap::new();
        meta.insert("format".into(), FORMAT.into());
        meta.insert("version".into(), "1".into());
        meta.insert("kind".into(), self.kind_name().into());
        meta.insert("style".into(), self.style.name().into());
        meta.insert("order".into(), self.order.name().into());
        meta.insert("reverse".into(), self.reverse.to_string());
        meta.insert("hidden_size".into(), self.hidden.to_string());
        for (k, t) in &self.temperatures.by_name {
            meta.insert(format!("temperature.{k}"), format!("{t}"));
        }
        for (k, b) in &self.temperatures.position_bias {
            meta.insert(
                format!("position_bias.{k}"),
                Value::from(b.clone()).to_string(),
            );
        }
        for (k, v) in &self.notes {
            meta.insert(format!("note.{k}"), v.clone());
        }
        let mut tensors: Vec<(String, Vec<usize>, &[f32])> = Vec::new();
        match &self.weights {
            Weights::None => {}
            Weights::Pointer {
                dim,
                q_w,
                q_b,
                k_w,
                k_b,
            } => {
                tensors.push(("q.weight".into(), vec![*dim, self.hidden], q_w));
                tensors.push(("q.bias".into(), vec![*dim], q_b));
                tensors.push(("k.weight".into(), vec![*dim, self.hidden], k_w));
                tensors.push(("k.bias".into(), vec![*dim], k_b));
            }
            Weights::Probe {
                classes,
                w,
                b,
                question,
            } => {
                meta.insert("classes".into(), Value::from(classes.clone()).to_string());
                meta.insert("question".into(), question.to_string());
                tensors.push(("probe.weight".into(), vec![classes.len(), self.hidden], w));
                tensors.push(("probe.bias".into(), vec![classes.len()], b));
            }
        }
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView)> = bytes
            .iter()
            .map(|(n, s, b)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .map(|v| (n.clone(), v))
                    .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
            })
            .collect::<Result<_, _>>()?;
        let data = safetensors::serialize(views, Some(meta))
            .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
        let tmp = tmp_path(path);
        std::fs::write(&tmp, data)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Reads a head, checking everything the file says about itself.
    pub fn load(path: &Path) -> Result<Head, Error> {
        let data =
            std::fs::read(path).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
        Head::from_bytes(&data, path)
    }

    /// [`Head::load`] of bytes already read (`path` names them in errors).
    pub fn from_bytes(data: &[u8], path: &Path) -> Result<Head, Error> {
        let bad = |why: String| Error::Invalid(format!("{}: {why}", path.display()));
        let st = safetensors::SafeTensors::deserialize(data)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let (_, parsed) = safetensors::SafeTensors::read_metadata(data)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let meta = parsed.metadata().clone().unwrap_or_default();
        let get = |k: &str| meta.get(k).map(String::as_str);
        if get("format") != Some(FORMAT) {
            return Err(bad(format!(
                "not a decision head (its metadata has no format = {FORMAT})"
            )));
        }
        if get("version") != Some("1") {
            return Err(bad(format!(
                "decision head version {:?}; this pocket reads version 1",
                get("version")
            )));
        }
        let style = get("style")
            .and_then(Style::parse)
            .ok_or_else(|| bad(format!("unknown readout style {:?}", get("style"))))?;
        let order = get("order")
            .and_then(Order::parse)
            .ok_or_else(|| bad(format!("unknown prompt order {:?}", get("order"))))?;
        let hidden: usize = get("hidden_size")
            .and_then(|s| s.parse().ok())
            .filter(|&h| h > 0 && h <= 1 << 16)
            .ok_or_else(|| bad("hidden_size missing or out of range".into()))?;
        let mut temperatures = Temperatures::default();
        let mut notes = BTreeMap::new();
        for (k, v) in &meta {
            if let Some(name) = k.strip_prefix("temperature.") {
                let t: f64 = v
                    .parse()
                    .ok()
                    .filter(|t: &f64| t.is_finite() && *t > 0.0)
                    .ok_or_else(|| bad(format!("{k} = {v:?} is not a positive number")))?;
                temperatures.by_name.insert(name.to_string(), t);
            } else if let Some(name) = k.strip_prefix("position_bias.") {
                let b: Vec<f64> = serde_json::from_str(v)
                    .ok()
                    .filter(|b: &Vec<f64>| b.len() <= 255 && b.iter().all(|x| x.is_finite()))
                    .ok_or_else(|| bad(format!("{k} is not a list of at most 255 numbers")))?;
                temperatures.position_bias.insert(name.to_string(), b);
            } else if let Some(name) = k.strip_prefix("note.") {
                notes.insert(name.to_string(), v.clone());
            }
        }
        let tensor = |name: &str, shape: &[usize]| -> Result<Vec<f32>, Error> {
            let t = st
                .tensor(name)
                .map_err(|_| bad(format!("tensor {name} is missing")))?;
            if t.dtype() != safetensors::Dtype::F32 {
                return Err(bad(format!("tensor {name} is {:?}, not F32", t.dtype())));
            }
            if t.shape() != shape {
                return Err(bad(format!(
                    "tensor {name} has shape {:?}; expected {shape:?}",
                    t.shape()
                )));
            }
            let v: Vec<f32> = t
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if v.iter().any(|x| !x.is_finite()) {
                return Err(bad(format!("tensor {name} holds NaN or infinite values")));
            }
            Ok(v)
        };
        let weights = match get("kind") {
            Some("temperature") => Weights::None,
            Some("pointer") => {
                let q = st
                    .tensor("q.weight")
                    .map_err(|_| bad("tensor q.weight is missing".into()))?;
                let dim = *q.shape().first().unwrap_or(&0);
                if dim == 0 || dim > 1 << 14 {
                    return Err(bad(format!("pointer dimension {dim} out of range")));
                }
                Weights::Pointer {
                    dim,
                    q_w: tensor("q.weight", &[dim, hidden])?,
                    q_b: tensor("q.bias", &[dim])?,
                    k_w: tensor("k.weight", &[dim, hidden])?,
                    k_b: tensor("k.bias", &[dim])?,
                }
            }
            Some("probe") => {
                let classes: Vec<String> = get("classes")
                    .and_then(|c| serde_json::from_str(c).ok())
                    .filter(|c: &Vec<String>| !c.is_empty() && c.len() <= 255)
                    .ok_or_else(|| bad("classes missing or not a list of 1 to 255 names".into()))?;
                let question: Value = get("question")
                    .and_then(|q| serde_json::from_str(q).ok())
                    .ok_or_else(|| bad("question missing or not JSON".into()))?;
                let n = classes.len();
                Weights::Probe {
                    w: tensor("probe.weight", &[n, hidden])?,
                    b: tensor("probe.bias", &[n])?,
                    classes,
                    question,
                }
            }
            other => return Err(bad(format!("unknown head kind {other:?}"))),
        };
        Ok(Head {
            style,
            order,
            reverse: get("reverse") == Some("true"),
            hidden,
            temperatures,
            weights,
            notes,
        })
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}
