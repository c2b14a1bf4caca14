//! A System One request read and checked: the `state`, and named typed questions. Every
//! problem is reported at once, each with its place in the body (`["body", "questions",
//! "urgency", "criteria"]`), a message and a machine-readable type, in the shape of the
//! API's `HTTPValidationError` (FastAPI/pydantic's), so a server answers 422 with it and the
//! CLI prints its first line.

use serde::Serialize;
use serde_json::{Map, Value};

/// The three question types of the System One API (`box` needs an image model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One key of `criteria`.
    Choice,
    /// A yes/no probability.
    Noul,
    /// The expected level over ordered `criteria`.
    Score,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Choice => "choice",
            Kind::Noul => "noul",
            Kind::Score => "score",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "choice" => Some(Kind::Choice),
            "noul" => Some(Kind::Noul),
            "score" => Some(Kind::Score),
            _ => None,
        }
    }
}

/// One option of a question: a choice's key, a noul's `false`/`true`, a score's level index.
#[derive(Clone, Debug, PartialEq)]
pub struct Opt {
    pub key: String,
    /// What the option means (text, object, array), or null.
    pub description: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    /// The name the request gave it (the answer's key).
    pub name: String,
    pub kind: Kind,
    /// Text, object, array, or null.
    pub instructions: Value,
    /// A choice's options in `criteria` order; a noul's `false`, `true`; a score's levels
    /// `"0"`, `"1"`, … with their descriptions.
    pub options: Vec<Opt>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The `model` the client named (answers name the served model whatever it says).
    pub model: Option<String>,
    /// The content every question is about: text, object or array.
    pub state: Value,
    pub questions: Vec<Question>,
}

/// One place in a request body.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Loc {
    Key(String),
    Index(usize),
}

/// One problem with a request, as the API's `ValidationError`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Invalid {
    pub loc: Vec<Loc>,
    pub msg: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

impl Invalid {
    /// `body.questions.urgency.criteria: "criteria" must …`: one line for a terminal.
    pub fn line(&self) -> String {
        let path: Vec<String> = self
            .loc
            .iter()
            .map(|l| match l {
                Loc::Key(k) => k.clone(),
                Loc::Index(i) => i.to_string(),
            })
            .collect();
        format!("{}: {}", path.join("."), self.msg)
    }
}

/// What a request may ask of this model.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_questions: usize,
    /// Options of a choice question (the readout's labels bound it).
    pub max_options: usize,
    /// Levels of a score question.
    pub max_levels: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_questions: 64,
            max_options: 255,
            max_levels: 10,
        }
    }
}

struct Checker {
    errors: Vec<Invalid>,
}

impl Checker {
    fn push(&mut self, loc: &[Loc], kind: &str, msg: impl Into<String>, input: Option<&Value>) {
        self.errors.push(Invalid {
            loc: loc.to_vec(),
            msg: msg.into(),
            kind: kind.into(),
            input: input.map(short),
        });
    }

    /// Text, object, array (or null when `null_ok`): the API's `Content`.
    fn content(&mut self, loc: &[Loc], v: &Value, null_ok: bool) -> bool {
        let ok = matches!(v, Value::String(_) | Value::Object(_) | Value::Array(_))
            || (null_ok && v.is_null());
        if !ok {
            let or_null = if null_ok { " or null" } else { "" };
            self.push(
                loc,
                "content_type",
                format!("Input should be a string, an object or an array{or_null}"),
                Some(v),
            );
        }
        ok
    }
}

/// An input echoed in an error, cut short (a 100 KB state is not sent back whole).
fn short(v: &Value) -> Value {
    let s = v.to_string();
    if s.len() <= 200 {
        return v.clone();
    }
    let mut cut = 200;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    Value::String(format!("{}…", &s[..cut]))
}

fn key(k: &str) -> Loc {
    Loc::Key(k.to_string())
}

/// Reads a request body; all of its problems, or the request.
pub fn parse(body: &Value, limits: &Limits) -> Result<Request, Vec<Invalid>> {
    let mut c = Checker { errors: Vec::new() };
    let root = [key("body")];
    let Some(obj) = body.as_object() else {
        c.push(
            &root,
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            Some(body),
        );
        return Err(c.errors);
    };
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            c.push(
                &[key("body"), key("model")],
                "string_type",
                "Input should be a valid string",
                Some(v),
            );
            None
        }
    };
    for media in ["assets", "files", "images", "videos"] {
        if obj.get(media).is_some_and(|v| !v.is_null()) {
            c.push(
                &[key("body"), key(media)],
                "unsupported",
                "images and other media need a vision model; this server runs a text model",
                None,
            );
        }
    }
    let state = match obj.get("state") {
        None => {
            c.push(
                &[key("body"), key("state")],
                "missing",
                "Field required",
                None,
            );
            Value::Null
        }
        Some(v) => {
            c.content(&[key("body"), key("state")], v, false);
            v.clone()
        }
    };
    let mut questions = Vec::new();
    let qloc = [key("body"), key("questions")];
    match obj.get("questions") {
        None => c.push(&qloc, "missing", "Field required", None),
        Some(Value::Object(qs)) => {
            if qs.is_empty() {
                c.push(
                    &qloc,
                    "too_short",
                    "Dictionary should have at least 1 item after validation, not 0",
                    None,
                );
            } else if qs.len() > limits.max_questions {
                c.push(
                    &qloc,
                    "too_long",
                    format!(
                        "{} questions; a request may ask at most {}",
                        qs.len(),
                        limits.max_questions
                    ),
                    None,
                );
            } else {
                for (name, q) in qs {
                    let mut loc = qloc.to_vec();
                    loc.push(key(name));
                    if let Some(q) = question(&mut c, &loc, name, q, limits) {
                        questions.push(q);
                    }
                }
            }
        }
        Some(v) => c.push(
            &qloc,
            "dict_type",
            "Input should be a valid dictionary",
            Some(v),
        ),
    }
    if c.errors.is_empty() {
        Ok(Request {
            model,
            state,
            questions,
        })
    } else {
        Err(c.errors)
    }
}

fn question(
    c: &mut Checker,
    loc: &[Loc],
    name: &str,
    q: &Value,
    limits: &Limits,
) -> Option<Question> {
    if name.is_empty() {
        c.push(
            loc,
            "string_too_short",
            "A question's name must not be empty",
            None,
        );
        return None;
    }
    let Some(q) = q.as_object() else {
        c.push(
            loc,
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            Some(q),
        );
        return None;
    };
    let kind = match q.get("type") {
        None => {
            c.push(
                loc,
                "union_tag_not_found",
                "Unable to extract tag using discriminator 'type'",
                None,
            );
            return None;
        }
        Some(Value::String(t)) if t == "box" => {
            let mut l = loc.to_vec();
            l.push(key("type"));
            c.push(
                &l,
                "unsupported",
                "box questions need a vision model; this server runs a text model",
                None,
            );
            return None;
        }
        Some(Value::String(t)) if Kind::parse(t).is_some() => Kind::parse(t)?,
        Some(t) => {
            c.push(
                loc,
                "union_tag_invalid",
                format!(
                    "Input tag {} found using 'type' does not match any of the expected tags: \
                     'noul', 'choice', 'score'",
                    t
                ),
                Some(t),
            );
            return None;
        }
    };
    let mut ok = true;
    let mut iloc = loc.to_vec();
    iloc.push(key("instructions"));
    let instructions = q.get("instructions").cloned().unwrap_or(Value::Null);
    ok &= c.content(&iloc, &instructions, true);
    let mut cloc = loc.to_vec();
    cloc.push(key("criteria"));
    let criteria = q.get("criteria").unwrap_or(&Value::Null);
    let options = match kind {
        Kind::Choice => choice_options(c, &cloc, criteria, limits.max_options),
        Kind::Score => score_options(c, &cloc, criteria, limits.max_levels),
        Kind::Noul => {
            let opts = noul_options(c, &cloc, criteria);
            let described = opts
                .as_ref()
                .is_some_and(|o| o.iter().any(|o| !o.description.is_null()));
            if opts.is_some() && instructions.is_null() && !described {
                c.push(
                    &iloc,
                    "missing",
                    "A noul question needs instructions, or criteria describing an outcome",
                    None,
                );
                ok = false;
            }
            opts
        }
    };
    let options = options?;
    ok.then(|| Question {
        name: name.to_string(),
        kind,
        instructions,
        options,
    })
}

fn choice_options(c: &mut Checker, loc: &[Loc], criteria: &Value, max: usize) -> Option<Vec<Opt>> {
    let Some(map) = criteria.as_object() else {
        let msg = if criteria.is_null() {
            "Field required: a choice question needs \"criteria\", an object of options"
        } else {
            "Input should be a valid dictionary of options"
        };
        let kind = if criteria.is_null() {
            "missing"
        } else {
            "dict_type"
        };
        c.push(loc, kind, msg, (!criteria.is_null()).then_some(criteria));
        return None;
    };
    if map.is_empty() {
        c.push(
            loc,
            "too_short",
            "Dictionary should have at least 1 item after validation, not 0",
            None,
        );
        return None;
    }
    if map.len() > max {
        c.push(
            loc,
            "too_long",
            format!(
                "\"criteria\" has {} options; this model answers at most {max}",
                map.len()
            ),
            None,
        );
        return None;
    }
    let mut ok = true;
    let mut opts = Vec::with_capacity(map.len());
    for (k, d) in map {
        let mut l = loc.to_vec();
        l.push(key(k));
        if k.trim().is_empty() {
            c.push(
                &l,
                "string_too_short",
                "An option's key must not be empty",
                None,
            );
            ok = false;
        }
        ok &= c.content(&l, d, true);
        opts.push(Opt {
            key: k.clone(),
            description: d.clone(),
        });
    }
    ok.then_some(opts)
}

fn score_options(c: &mut Checker, loc: &[Loc], criteria: &Value, max: usize) -> Option<Vec<Opt>> {
    let Some(levels) = criteria.as_array() else {
        let kind = if criteria.is_null() {
            "missing"
        } else {
            "list_type"
        };
        let msg = if criteria.is_null() {
            "Field required: a score question needs \"criteria\", a list of levels"
        } else {
            "Input should be a valid list of levels"
        };
        c.push(loc, kind, msg, (!criteria.is_null()).then_some(criteria));
        return None;
    };
    if levels.is_empty() {
        c.push(
            loc,
            "too_short",
            "List should have at least 1 item after validation, not 0",
            None,
        );
        return None;
    }
    if levels.len() > max {
        c.push(
            loc,
            "too_long",
            format!(
                "\"criteria\" has {} levels; a score question has at most {max}",
                levels.len()
            ),
            None,
        );
        return None;
    }
    let mut ok = true;
    let opts = levels
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut l = loc.to_vec();
            l.push(Loc::Index(i));
            ok &= c.content(&l, d, false);
            Opt {
                key: i.to_string(),
                description: d.clone(),
            }
        })
        .collect();
    ok.then_some(opts)
}

fn noul_options(c: &mut Checker, loc: &[Loc], criteria: &Value) -> Option<Vec<Opt>> {
    let empty = Map::new();
    let map = match criteria {
        Value::Null => &empty,
        Value::Object(m) => m,
        v => {
            c.push(
                loc,
                "model_type",
                "Input should be an object with \"true\" and \"false\" descriptions, or null",
                Some(v),
            );
            return None;
        }
    };
    let mut ok = true;
    let opts = ["false", "true"]
        .iter()
        .map(|&k| {
            let d = map.get(k).cloned().unwrap_or(Value::Null);
            let mut l = loc.to_vec();
            l.push(key(k));
            ok &= c.content(&l, &d, true);
            Opt {
                key: k.to_string(),
                description: d,
            }
        })
        .collect();
    ok.then_some(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(v: Value) -> Vec<String> {
        parse(&v, &Limits::default())
            .expect_err("invalid")
            .iter()
            .map(Invalid::line)
            .collect()
    }

    #[test]
    fn a_request_reads_into_typed_questions_in_order() {
        let r = parse(
            &json!({"model": "m", "state": {"msg": "hi"}, "questions": {
                "intent": {"type": "choice", "instructions": "Which?", "criteria": {"b": "B", "a": null}},
                "urgent": {"type": "noul", "instructions": "Urgent?"},
                "mood": {"type": "score", "criteria": ["calm", {"x": 1}]}}}),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(r.model.as_deref(), Some("m"));
        let names: Vec<_> = r.questions.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["intent", "urgent", "mood"]);
        let keys = |q: &Question| q.options.iter().map(|o| o.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&r.questions[0]), ["b", "a"]);
        assert_eq!(keys(&r.questions[1]), ["false", "true"]);
        assert_eq!(keys(&r.questions[2]), ["0", "1"]);
        assert_eq!(r.questions[2].options[1].description, json!({"x": 1}));
    }

    #[test]
    fn every_problem_is_named_by_its_place() {
        let e = errors(json!({"questions": {
            "a": {"type": "choice", "criteria": {}},
            "b": {"type": "score", "criteria": ["1","2","3","4","5","6","7","8","9","10","11"]},
            "c": {"type": "maybe"},
            "d": {"type": "noul"},
            "e": {"type": "choice", "instructions": 5, "criteria": {"x": 1}}}}));
        assert_eq!(e[0], "body.state: Field required");
        assert!(e[1].starts_with("body.questions.a.criteria: Dictionary should have at least 1"));
        assert!(e[2].starts_with("body.questions.b.criteria: \"criteria\" has 11 levels"));
        assert!(e[3].starts_with("body.questions.c: Input tag \"maybe\""));
        assert!(e[4].starts_with("body.questions.d.instructions: A noul question needs"));
        assert!(e[5].starts_with("body.questions.e.instructions: Input should be a string"));
        assert!(e[6].starts_with("body.questions.e.criteria.x: Input should be a string"));
        assert_eq!(e.len(), 7);
    }

    #[test]
    fn limits_and_shapes_are_refused() {
        let many: Map<String, Value> = (0..300).map(|i| (format!("k{i}"), json!(null))).collect();
        let e =
            errors(json!({"state": "s", "questions": {"q": {"type": "choice", "criteria": many}}}));
        assert_eq!(
            e,
            ["body.questions.q.criteria: \"criteria\" has 300 options; this model answers at most 255"]
        );
        assert_eq!(
            errors(json!({"state": 3, "questions": {}})),
            [
                "body.state: Input should be a string, an object or an array",
                "body.questions: Dictionary should have at least 1 item after validation, not 0"
            ]
        );
        assert_eq!(
            errors(json!([1])),
            ["body: Input should be a valid dictionary or object to extract fields from"]
        );
        let e =
            errors(json!({"state": "s", "images": ["data:"], "questions": {"q": {"type": "box"}}}));
        assert!(e[0].starts_with("body.images: images and other media need a vision model"));
        assert!(e[1].starts_with("body.questions.q.type: box questions need a vision model"));
    }
}
