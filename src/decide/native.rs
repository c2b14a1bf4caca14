//! Decision models that say so in their GGUF, read as llama.cpp's server reads them
//! (`tools/server/server-decision.cpp`): `<arch>.decision.type`, the softmax temperatures
//! `<arch>.decision.temperature.<type>[.<bucket>]`, and the `systemone` chat template
//! (`tokenizer.chat_template.systemone`) that renders each question into the model's own
//! prompt. The template gets `id`, `type`, `instructions`, `state` (the JSON value as sent),
//! `options` (`key`, `description`, and for lev a `label`) and `images` (empty).
//!
//! - **openjev**: one letter per option (A–Z, then a–z), read from the next-token logits at
//!   the prompt's end; a noul question lists true first.
//! - **lev**: labels A, B, …, then AA, AB, … (those that are one token), a choice asked in both
//!   option orders and averaged, the template's input with sorted keys, and a noul read as a
//!   rating from 0 (no) to 8 (yes) at labels A–I, answered as the expected rating / 8.
//! - **kev**: a pointer head (`cls.output.weight`, `[2d, hidden]`: the query half, then the key
//!   half): the prompt's last hidden state against each option's `<|box_end|>` token; its
//!   text inputs flattened to text (keys kept as labels) and escaped.
//!
//! The other types llama.cpp knows (laya, nimble, clef, pplx-decider, lfm2-d1, lfm2-d1-omni)
//! need encoders or heads pocket does not run: they are refused by name. Unlike llama.cpp,
//! pocket escapes special-token spellings in openjev and lev inputs too.

use super::answer::Temperatures;
use super::head::{Head, Weights};
use super::render::{Escaper, Order, Plan, Read, Style, Variant, LETTERS};
use super::request::{Kind, Question, Request};
use crate::chat_template::ChatTemplate;
use crate::loader::LoadedModel;
use crate::Error;
use pocket_formats::gguf::reader::{GgufFile, GgufValue};
use pocket_formats::model_file::ModelFile;
use serde_json::{json, Map, Value};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeKind {
    OpenJev,
    Lev,
    Kev,
}

impl NativeKind {
    pub fn name(self) -> &'static str {
        match self {
            NativeKind::OpenJev => "openjev",
            NativeKind::Lev => "lev",
            NativeKind::Kev => "kev",
        }
    }
}

/// lev reads a noul question from a 0–8 rating.
const LEV_RATINGS: usize = 9;

/// A GGUF decision model's prompt and readout.
pub struct Native<'m> {
    model: &'m LoadedModel,
    pub kind: NativeKind,
    template: ChatTemplate,
    pub temperatures: Temperatures,
    /// openjev's and lev's labels: text and token id.
    labels: Vec<(String, u32)>,
    /// kev's option marker (`<|box_end|>`).
    marker: Option<u32>,
    /// kev's pointer head.
    pub head: Option<Arc<Head>>,
    escaper: Escaper,
}

fn gguf(model: &LoadedModel) -> Option<&GgufFile> {
    match &model.file {
        ModelFile::Gguf { file, .. } => Some(file),
        _ => None,
    }
}

impl<'m> Native<'m> {
    /// The model's decision type, when its GGUF declares one.
    pub fn from_model(model: &'m LoadedModel) -> Result<Option<Native<'m>>, Error> {
        let Some(f) = gguf(model) else {
            return Ok(None);
        };
        let arch = f
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .unwrap_or("");
        let prefix = format!("{arch}.decision.");
        let Some(type_name) = f.get(&format!("{prefix}type")).and_then(GgufValue::as_str) else {
            return Ok(None);
        };
        let path = model.path.display();
        let kind = match type_name {
            "openjev" => NativeKind::OpenJev,
            "lev" => NativeKind::Lev,
            "kev" => NativeKind::Kev,
            other => {
                return Err(Error::Unsupported(format!(
                    "{path}: decision type {other:?} is not supported (pocket runs openjev, lev \
                     and kev decision models; {other} needs an encoder or head pocket does not \
                     have)"
                )))
            }
        };
        let src = f
            .get("tokenizer.chat_template.systemone")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{path}: decision model has no \"systemone\" template \
                     (tokenizer.chat_template.systemone)"
                ))
            })?;
        let template = ChatTemplate::new(src, &model.path)?;
        let mut temperatures = Temperatures {
            lev_buckets: kind == NativeKind::Lev,
            ..Temperatures::default()
        };
        let tprefix = format!("{prefix}temperature.");
        for (k, v) in &f.metadata {
            if let Some(name) = k.strip_prefix(&tprefix) {
                let t = v
                    .as_f64()
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                            "{path}: invalid decision temperature: {k} = {}",
                            v.summary()
                        ))
                    })?;
                temperatures.by_name.insert(name.to_string(), t);
            }
        }
        let single = |text: &str| -> Option<u32> {
            match model.tokenizer.encode(text, false).ok()?.as_slice() {
                [id] => Some(*id),
                _ => None,
            }
        };
        let mut labels = Vec::new();
        let mut marker = None;
        let mut head = None;
        match kind {
            NativeKind::OpenJev => {
                let letters = format!("{LETTERS}{}", LETTERS.to_lowercase());
                for c in letters.chars() {
                    let id = single(&c.to_string()).ok_or_else(|| {
                        Error::Invalid(format!(
                            "{path}: decision label '{c}' is not a single token"
                        ))
                    })?;
                    labels.push((c.to_string(), id));
                }
            }
            NativeKind::Lev => {
                let mut codes: Vec<String> = LETTERS.chars().map(String::from).collect();
                for a in LETTERS.chars() {
                    codes.extend(LETTERS.chars().map(|b| format!("{a}{b}")));
                }
                for c in codes {
                    if labels.len() < 255 {
                        if let Some(id) = single(&c) {
                            labels.push((c, id));
                        }
                    }
                }
                if labels.len() < LEV_RATINGS {
                    return Err(Error::Invalid(format!(
                        "{path}: lev needs {LEV_RATINGS} single-token labels; this vocabulary has {}",
                        labels.len()
                    )));
                }
            }
            NativeKind::Kev => {
                let ids = model.tokenizer.encode("<|box_end|>", false)?;
                let [id] = ids[..] else {
                    return Err(Error::Invalid(format!(
                        "{path}: decision model has no <|box_end|> token"
                    )));
                };
                marker = Some(id);
                head = Some(Arc::new(kev_head(f, model, &temperatures)?));
            }
        }
        Ok(Some(Native {
            model,
            kind,
            template,
            temperatures,
            labels,
            marker,
            head,
            escaper: Escaper::new(model),
        }))
    }

    /// The most options one question may have.
    pub fn max_options(&self) -> usize {
        match self.kind {
            NativeKind::OpenJev | NativeKind::Lev => self.labels.len(),
            NativeKind::Kev => 255,
        }
    }

    pub fn plan(&self, req: &Request) -> Result<Plan, Error> {
        let mut variants = Vec::new();
        for (qi, q) in req.questions.iter().enumerate() {
            let two = self.kind == NativeKind::Lev && q.kind == Kind::Choice && q.options.len() > 1;
            for reversed in if two { vec![false, true] } else { vec![false] } {
                variants.push(self.variant(qi, q, &req.state, reversed)?);
            }
        }
        Ok(Plan::settled(variants))
    }

    fn variant(
        &self,
        qi: usize,
        q: &Question,
        state: &Value,
        reversed: bool,
    ) -> Result<Variant, Error> {
        // Options as shown: a noul question lists true first for openjev (and kev does not
        // care); the second lev variant is reversed.
        let true_first = q.kind == Kind::Noul && self.kind == NativeKind::OpenJev;
        let mut shown = q.options.clone();
        if reversed || true_first {
            shown.reverse();
        }
        let kev = self.kind == NativeKind::Kev;
        let e = &self.escaper;
        let text = |v: &Value| Value::String(e.text(&kev_render(v, 0)));
        let options: Vec<Value> = shown
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let mut opt = Map::new();
                if kev {
                    opt.insert("key".into(), Value::String(e.text(&o.key)));
                    let d = if o.description.is_null() {
                        Value::Null
                    } else {
                        text(&o.description)
                    };
                    opt.insert("description".into(), d);
                } else {
                    opt.insert("key".into(), Value::String(e.text(&o.key)));
                    opt.insert("description".into(), e.value(&o.description));
                }
                if self.kind == NativeKind::Lev {
                    opt.insert("label".into(), Value::String(self.labels[i].0.clone()));
                }
                Value::Object(opt)
            })
            .collect();
        let mut inp = json!({
            "id": q.name,
            "type": q.kind.name(),
            "instructions": if kev { text(&q.instructions) } else { e.value(&q.instructions) },
            "state": if kev { text(state) } else { e.value(state) },
            "options": options,
        });
        if self.kind == NativeKind::Lev {
            inp = sort_keys(&inp);
        }
        inp["images"] = json!([]);
        let prompt = self.template.render_globals(&inp)?;
        let tokens = self.model.tokenizer.encode(&prompt, false)?;
        if tokens.is_empty() {
            return Err(Error::Invalid("the decision prompt has no tokens".into()));
        }
        let read = match self.kind {
            NativeKind::Kev => {
                let m = self.marker.expect("kev has its marker");
                let marks: Vec<usize> = (0..tokens.len()).filter(|&i| tokens[i] == m).collect();
                if marks.len() != shown.len() || marks.last() == Some(&(tokens.len() - 1)) {
                    return Err(Error::Invalid(format!(
                        "question {:?}: unexpected layout of the decision prompt ({} markers for \
                         {} options)",
                        q.name,
                        marks.len(),
                        shown.len()
                    )));
                }
                Read::Markers(marks)
            }
            _ => {
                let n = match (self.kind, q.kind) {
                    (NativeKind::Lev, Kind::Noul) => LEV_RATINGS,
                    _ => shown.len(),
                };
                Read::Labels(self.labels[..n].iter().map(|l| vec![l.1]).collect())
            }
        };
        Ok(Variant {
            question: qi,
            reversed: reversed || true_first,
            tokens,
            read,
            ratings: self.kind == NativeKind::Lev && q.kind == Kind::Noul,
        })
    }
}

/// kev's head from `cls.output.weight` (`[2d, hidden]`) and `cls.output.bias`.
fn kev_head(f: &GgufFile, model: &LoadedModel, temperatures: &Temperatures) -> Result<Head, Error> {
    let path = model.path.display();
    let h = model.model.spec.hidden_size;
    let read = |name: &str| -> Result<(Vec<f32>, usize), Error> {
        let t = f
            .tensor(name)
            .ok_or_else(|| Error::Invalid(format!("{path}: kev decision model has no {name}")))?;
        let (rows, cols) = t.matrix_shape();
        let row_bytes = t.ty.bytes_for(cols as u64).ok_or_else(|| {
            Error::Invalid(format!(
                "{path}: {name}: a row of {cols} does not fill {} blocks",
                t.ty.name()
            ))
        })? as usize;
        let b = t.data.as_slice();
        if b.len() < rows * row_bytes {
            return Err(Error::Invalid(format!("{path}: {name} is truncated")));
        }
        let mut out = vec![0.0f32; rows * cols];
        for (r, o) in out.chunks_exact_mut(cols).enumerate() {
            pocket_formats::gguf::ggml::dequantize(t.ty, &b[r * row_bytes..(r + 1) * row_bytes], o);
        }
        if out.iter().any(|x| !x.is_finite()) {
            return Err(Error::Invalid(format!(
                "{path}: {name} holds NaN or infinite values"
            )));
        }
        Ok((out, cols))
    };
    let (w, cols) = read("cls.output.weight")?;
    let rows = w.len() / cols.max(1);
    if cols != h || rows % 2 != 0 || rows == 0 {
        return Err(Error::Invalid(format!(
            "{path}: cls.output.weight is [{rows}, {cols}]; a kev head is [2d, {h}]"
        )));
    }
    let (b, _) = match f.tensor("cls.output.bias") {
        Some(_) => read("cls.output.bias")?,
        None => (vec![0.0; rows], rows),
    };
    if b.len() != rows {
        return Err(Error::Invalid(format!(
            "{path}: cls.output.bias has {} values for {rows} rows",
            b.len()
        )));
    }
    let d = rows / 2;
    Ok(Head {
        style: Style::Pointer,
        order: Order::StateFirst,
        reverse: false,
        hidden: h,
        temperatures: temperatures.clone(),
        weights: Weights::Pointer {
            dim: d,
            q_w: w[..d * h].to_vec(),
            q_b: b[..d].to_vec(),
            k_w: w[d * h..].to_vec(),
            k_b: b[d..].to_vec(),
        },
        notes: Default::default(),
    })
}

/// Every object's keys sorted (lev was trained on sorted keys).
fn sort_keys(v: &Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(a.iter().map(sort_keys).collect()),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sort_keys(&m[k])))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// kev's text form of a JSON value: strings as they are, booleans `True`/`False`, null empty,
/// arrays as `- item` lines, objects as `key: value` lines, nesting indented two spaces.
pub fn kev_render(v: &Value, indent: usize) -> String {
    let pad = " ".repeat(2 * indent);
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Array(a) => a
            .iter()
            .map(|item| {
                let t = kev_render(item, indent + 1);
                format!("{pad}- {}", t.trim_start_matches([' ', '\t', '\n', '\r']))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(m) => m
            .iter()
            .map(|(k, item)| {
                let nested = item.is_object() || item.is_array();
                let sep = if nested { ":\n" } else { ": " };
                let inner = kev_render(item, if nested { indent + 1 } else { 0 });
                format!("{pad}{k}{sep}{inner}")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Number(n) => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kev_text_is_llama_cpps() {
        assert_eq!(kev_render(&json!({"a": {"b": "c"}}), 0), "a:\n  b: c");
        assert_eq!(kev_render(&json!(["a", "b"]), 0), "- a\n- b");
        assert_eq!(
            kev_render(&json!({"x": [1, true, null]}), 0),
            "x:\n  - 1\n  - True\n  - "
        );
        assert_eq!(
            sort_keys(&json!({"b": 1, "a": {"d": 2, "c": 3}})).to_string(),
            r#"{"a":{"c":3,"d":2},"b":1}"#
        );
    }
}
