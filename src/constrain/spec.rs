//! What an answer must look like, as the user wrote it: a JSON schema, a Lark or GBNF
//! grammar, a regular expression, or a list of labels. Checks here run before any model is
//! touched, so a bad schema or grammar is refused with its place named; the grammar engine's
//! own compile (in [`super::guide`]) then refuses whatever it does not implement.

use super::gbnf::{gbnf_to_lark, looks_like_gbnf};
use serde_json::Value;

/// Why a constraint was refused; the message names the place (a JSON pointer, a line).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConstraintError(pub String);

pub(super) fn err<T>(msg: impl Into<String>) -> Result<T, ConstraintError> {
    Err(ConstraintError(msg.into()))
}

/// A constraint on the answer's text.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// The answer is one JSON value that validates against the schema.
    JsonSchema(Value),
    /// The answer matches a grammar in llguidance's Lark dialect (GBNF is translated to it).
    Lark(String),
    /// The answer matches a regular expression in full.
    Regex(String),
    /// The answer is exactly one of these labels.
    Choices(Vec<String>),
}

impl Constraint {
    /// A JSON schema, checked for what pocket refuses itself: a `oneOf` whose branches could
    /// both match the same value (exact `oneOf` needs them disjoint; llguidance would
    /// otherwise treat it as `anyOf`).
    pub fn json_schema(schema: Value) -> Result<Constraint, ConstraintError> {
        match &schema {
            Value::Object(_) | Value::Bool(_) => {}
            _ => return err("a JSON schema must be an object or a boolean"),
        }
        check_one_of(&schema, "")?;
        check_keywords(&schema, "")?;
        Ok(Constraint::JsonSchema(schema))
    }

    /// A schema given as text (a file's contents or a literal on the command line).
    pub fn json_schema_text(text: &str) -> Result<Constraint, ConstraintError> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            ConstraintError(format!(
                "not valid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ))
        })?;
        Constraint::json_schema(v)
    }

    /// A grammar: GBNF when a rule is written `name ::= …`, else llguidance's Lark.
    pub fn grammar(text: &str) -> Result<Constraint, ConstraintError> {
        if text.trim().is_empty() {
            return err("the grammar is empty");
        }
        if looks_like_gbnf(text) {
            Ok(Constraint::Lark(gbnf_to_lark(text)?))
        } else {
            Ok(Constraint::Lark(text.to_string()))
        }
    }

    pub fn regex(re: &str) -> Result<Constraint, ConstraintError> {
        if re.is_empty() {
            return err("the regular expression is empty");
        }
        if let Err(e) = regex_syntax::Parser::new().parse(re) {
            return err(format!(
                "{re:?} is not a regular expression: {}",
                last_line(&e.to_string())
            ));
        }
        Ok(Constraint::Regex(re.to_string()))
    }

    /// Labels, each non-empty and distinct.
    pub fn choices(labels: Vec<String>) -> Result<Constraint, ConstraintError> {
        if labels.is_empty() {
            return err("the choice list is empty");
        }
        for (i, l) in labels.iter().enumerate() {
            if l.is_empty() {
                return err(format!("choice {} is empty", i + 1));
            }
            if labels[..i].contains(l) {
                return err(format!("choice {:?} is listed twice", l));
            }
        }
        Ok(Constraint::Choices(labels))
    }

    /// A few words for messages and `/stats`: "JSON schema", "3 choices" …
    pub fn describe(&self) -> String {
        match self {
            Constraint::JsonSchema(_) => "JSON schema".into(),
            Constraint::Lark(_) => "grammar".into(),
            Constraint::Regex(_) => "regex".into(),
            Constraint::Choices(c) => format!("{} choices", c.len()),
        }
    }

    /// The grammar llguidance compiles. JSON answers are written as Python's `json.dumps`
    /// writes them (`", "` and `": "`, no other whitespace): the spelling small models saw
    /// most, and fixed separators become forced tokens. `oneOf` is safe to compile as `anyOf`
    /// because [`json_schema`](Self::json_schema) checked its branches are disjoint.
    pub fn lark(&self) -> String {
        match self {
            Constraint::JsonSchema(s) => format!("start: %json {}", with_options(s)),
            Constraint::Lark(g) => g.clone(),
            Constraint::Regex(re) => format!("start: /{}/", re.replace('/', "\\/")),
            Constraint::Choices(c) => {
                let alts: Vec<String> = c.iter().map(|l| quote(l)).collect();
                format!("start: {}", alts.join(" | "))
            }
        }
    }
}

/// A JSON string literal, which Lark reads with the same escapes.
pub fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// The schema with pocket's llguidance options attached.
pub fn with_options(schema: &Value) -> Value {
    let mut s = match schema {
        Value::Bool(true) => serde_json::json!({}),
        Value::Bool(false) => serde_json::json!({"not": {}}),
        other => other.clone(),
    };
    if let Value::Object(m) = &mut s {
        m.insert(
            "x-guidance".into(),
            serde_json::json!({
                "item_separator": ", ",
                "key_separator": ": ",
                "whitespace_flexible": false,
                "coerce_one_of": true,
                "lenient": false,
            }),
        );
    }
    s
}

/// JSON-pointer escaping of one path segment.
fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Walks every subschema and refuses a `oneOf` whose branches might overlap.
fn check_one_of(v: &Value, at: &str) -> Result<(), ConstraintError> {
    match v {
        Value::Object(m) => {
            for (k, sub) in m {
                let here = format!("{at}/{}", seg(k));
                if k == "oneOf" {
                    let Some(branches) = sub.as_array() else {
                        return err(format!("{here}: oneOf must be an array"));
                    };
                    for i in 0..branches.len() {
                        for j in i + 1..branches.len() {
                            if !disjoint(&branches[i], &branches[j]) {
                                return err(format!(
                                    "{here}: branches {i} and {j} may both match one value; \
                                     oneOf is supported when its branches are told apart by \
                                     `type` or by a required property's `const`/`enum` \
                                     (else write anyOf)"
                                ));
                            }
                        }
                    }
                }
                // Keywords whose values are data, not schemas.
                if matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    continue;
                }
                check_one_of(sub, &here)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, sub) in items.iter().enumerate() {
                check_one_of(sub, &format!("{at}/{i}"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Draft 2020-12 (and draft 7) keywords the grammar engine does not implement. llguidance
/// refuses them too, but without saying where; this walk names the place.
const UNSUPPORTED: [&str; 15] = [
    "not",
    "if",
    "then",
    "else",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
];

/// Keywords whose value is a map from names to subschemas.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];
/// Keywords whose value is a subschema or a list of them.
const SCHEMA_VALUES: [&str; 8] = [
    "items",
    "additionalItems",
    "prefixItems",
    "additionalProperties",
    "anyOf",
    "oneOf",
    "allOf",
    "contains",
];

/// Refuses unsupported keywords and unreadable `pattern`s, naming the place; walks only
/// where subschemas live, so a property *named* `not` is fine.
fn check_keywords(v: &Value, at: &str) -> Result<(), ConstraintError> {
    let Value::Object(m) = v else {
        return Ok(());
    };
    for (k, sub) in m {
        let here = format!("{at}/{}", seg(k));
        if UNSUPPORTED.contains(&k.as_str()) {
            return err(format!(
                "{here}: the keyword {k:?} is not supported by constrained decoding"
            ));
        }
        if k == "pattern" {
            let Some(p) = sub.as_str() else {
                return err(format!("{here}: a pattern must be a string"));
            };
            if let Err(e) = regex_syntax::Parser::new().parse(p) {
                return err(format!(
                    "{here}: pattern {p:?} is not a regular expression: {}",
                    last_line(&e.to_string())
                ));
            }
        }
        if SCHEMA_MAPS.contains(&k.as_str()) {
            if let Value::Object(props) = sub {
                for (name, s) in props {
                    check_keywords(s, &format!("{here}/{}", seg(name)))?;
                }
            }
        } else if SCHEMA_VALUES.contains(&k.as_str()) {
            match sub {
                Value::Array(items) => {
                    for (i, s) in items.iter().enumerate() {
                        check_keywords(s, &format!("{here}/{i}"))?;
                    }
                }
                s => check_keywords(s, &here)?,
            }
        }
    }
    Ok(())
}

/// regex-syntax draws the pattern with a caret under the fault; its last line says what.
fn last_line(msg: &str) -> &str {
    msg.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .trim_start_matches("error: ")
}

/// JSON types a schema allows, when it says (`type`, or implied by `const`/`enum`).
fn types_of(s: &Value) -> Option<Vec<&'static str>> {
    let name = |t: &str| -> Option<&'static str> {
        Some(match t {
            "string" => "string",
            "number" => "number",
            "integer" => "integer",
            "boolean" => "boolean",
            "null" => "null",
            "object" => "object",
            "array" => "array",
            _ => return None,
        })
    };
    match s.get("type")? {
        Value::String(t) => Some(vec![name(t)?]),
        Value::Array(ts) => ts.iter().map(|t| name(t.as_str()?)).collect(),
        _ => None,
    }
}

fn types_overlap(a: &[&str], b: &[&str]) -> bool {
    let num = |t: &str| t == "number" || t == "integer";
    a.iter()
        .any(|x| b.iter().any(|y| x == y || (num(x) && num(y))))
}

/// The values a schema allows, when it lists them (`const` or `enum`).
fn listed(s: &Value) -> Option<Vec<&Value>> {
    if let Some(c) = s.get("const") {
        return Some(vec![c]);
    }
    s.get("enum")?.as_array().map(|v| v.iter().collect())
}

/// True when no value can match both schemas, by reasons that are easy to prove.
fn disjoint(a: &Value, b: &Value) -> bool {
    if let (Some(ta), Some(tb)) = (types_of(a), types_of(b)) {
        if !types_overlap(&ta, &tb) {
            return true;
        }
    }
    if let (Some(la), Some(lb)) = (listed(a), listed(b)) {
        if la.iter().all(|x| !lb.contains(x)) {
            return true;
        }
    }
    // Objects told apart by a property both require, with disjoint listed values.
    let req = |s: &Value| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (ra, rb) = (req(a), req(b));
    for p in ra.iter().filter(|p| rb.contains(p)) {
        let pa = a.get("properties").and_then(|m| m.get(p));
        let pb = b.get("properties").and_then(|m| m.get(p));
        if let (Some(pa), Some(pb)) = (pa, pb) {
            if let (Some(la), Some(lb)) = (listed(pa), listed(pb)) {
                if la.iter().all(|x| !lb.contains(x)) {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_of_needs_disjoint_branches_and_the_error_names_the_place() {
        let ok = json!({"properties": {"v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}});
        Constraint::json_schema(ok).unwrap();
        let tagged = json!({"oneOf": [
            {"type": "object", "required": ["kind"], "properties": {"kind": {"const": "a"}}},
            {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": ["b", "c"]}}}
        ]});
        Constraint::json_schema(tagged).unwrap();
        let bad =
            json!({"properties": {"n/x": {"oneOf": [{"type": "number"}, {"type": "integer"}]}}});
        let e = Constraint::json_schema(bad).unwrap_err().0;
        assert!(
            e.starts_with("/properties/n~1x/oneOf: branches 0 and 1"),
            "{e}"
        );
        // A `const` value that happens to look like a schema is data, not checked.
        Constraint::json_schema(json!({"const": {"oneOf": [1, 1]}})).unwrap();
        assert!(Constraint::json_schema(json!(3)).is_err());
        let e = Constraint::json_schema_text("{\"type\": }").unwrap_err().0;
        assert!(e.contains("line 1 column"), "{e}");
    }

    #[test]
    fn unsupported_keywords_and_bad_patterns_are_refused_where_they_are() {
        let e = Constraint::json_schema(json!({"type": "object", "properties": {
            "tags": {"type": "array", "uniqueItems": true}}}))
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("/properties/tags/uniqueItems: the keyword \"uniqueItems\""),
            "{e}"
        );
        let e = Constraint::json_schema(json!({"anyOf": [{"type": "string"}, {"not": {}}]}))
            .unwrap_err()
            .0;
        assert!(e.starts_with("/anyOf/1/not:"), "{e}");
        let e = Constraint::json_schema(json!({"properties": {"d": {"pattern": "[0-9"}}}))
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("/properties/d/pattern: pattern \"[0-9\""),
            "{e}"
        );
        // A property named like a keyword is a name, not a keyword.
        Constraint::json_schema(json!({"properties": {"not": {"type": "string"}, "if": {}}}))
            .unwrap();
    }

    #[test]
    fn choices_must_be_nonempty_and_distinct() {
        assert!(Constraint::choices(vec![]).is_err());
        assert!(Constraint::choices(vec!["a".into(), "".into()]).is_err());
        assert!(Constraint::choices(vec!["a".into(), "a".into()]).is_err());
        let c = Constraint::choices(vec!["yes".into(), "say \"no\"".into()]).unwrap();
        assert_eq!(c.lark(), r#"start: "yes" | "say \"no\"""#);
    }
}
