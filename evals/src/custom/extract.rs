//! Reading an answer out of the model's text, and the normalisation before comparing.

use super::spec::{Extract, Normalize};
use serde_json::Value;

/// The answer `rule` reads from `text`: a string, or (for `json`) the object as JSON text.
/// `None` when the rule finds nothing (no match, no JSON, no field, no label).
pub fn extract(rule: &Extract, text: &str, choices: &[String], norm: &Normalize) -> Option<String> {
    match rule {
        Extract::FirstLine => text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(String::from),
        Extract::Whole => Some(text.trim().to_string()),
        Extract::Regex(pattern) => {
            let re = regex::Regex::new(pattern).ok()?;
            let caps = re.captures(text)?;
            caps.get(1)
                .or_else(|| caps.get(0))
                .map(|m| m.as_str().trim().to_string())
        }
        Extract::Json => first_json_object(text).map(|v| v.to_string()),
        Extract::JsonField(path) => {
            let v = first_json_object(text)?;
            field(&v, path).map(as_text)
        }
        Extract::Choices => {
            let answer = normalize(text, norm);
            let labels: Vec<String> = choices.iter().map(|c| normalize(c, norm)).collect();
            if let Some(i) = labels.iter().position(|l| *l == answer) {
                return Some(choices[i].clone());
            }
            // The label mentioned first (the longest one at a tie: "not urgent" over "urgent").
            labels
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_empty())
                .filter_map(|(i, l)| {
                    answer
                        .find(l.as_str())
                        .map(|at| (at, usize::MAX - l.len(), i))
                })
                .min()
                .map(|(_, _, i)| choices[i].clone())
        }
    }
}

/// The first balanced `{…}` in `text` that parses as a JSON object.
pub fn first_json_object(text: &str) -> Option<Value> {
    for (start, _) in text.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(v @ Value::Object(_))) = stream.next() {
            return Some(v);
        }
    }
    None
}

/// `a.b.0.c` into objects and arrays.
pub fn field<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(v, |v, key| match v {
        Value::Object(m) => m.get(key),
        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// A JSON value as the text an answer would be: strings bare, the rest as JSON.
pub fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn normalize(s: &str, n: &Normalize) -> String {
    let mut t = if n.lowercase {
        s.to_lowercase()
    } else {
        s.to_string()
    };
    if n.remove_punctuation {
        t.retain(|c| !c.is_ascii_punctuation() && !matches!(c, '“' | '”' | '‘' | '’' | '…'));
    }
    if n.remove_articles {
        t = t
            .split_whitespace()
            .filter(|w| !matches!(w.to_lowercase().as_str(), "a" | "an" | "the"))
            .collect::<Vec<_>>()
            .join(" ");
    }
    if n.collapse_whitespace {
        t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    if n.strip {
        t = t.trim().to_string();
    }
    t
}
