//! Small helpers for reading fields out of HF JSON files with errors that name the file and
//! the field. HF configs are loosely typed (ints written as floats, ids as an int or a list), so
//! we read `serde_json::Value` and check each field ourselves.

use crate::FormatError;
use serde_json::Value;
use std::path::Path;

/// Reads and parses a JSON file, naming it in any error.
pub fn read_json(path: &Path) -> Result<Value, FormatError> {
    let text = std::fs::read_to_string(path).map_err(|e| FormatError::io(path, e))?;
    serde_json::from_str(&text).map_err(|error| FormatError::Json {
        path: path.to_path_buf(),
        error,
    })
}

/// A view of one JSON object that reports errors against its file.
pub struct Fields<'a> {
    pub path: &'a Path,
    pub obj: &'a Value,
}

impl<'a> Fields<'a> {
    pub fn new(path: &'a Path, obj: &'a Value) -> Result<Self, FormatError> {
        if !obj.is_object() {
            return Err(FormatError::Invalid {
                path: path.to_path_buf(),
                reason: "expected a JSON object at the top level".into(),
            });
        }
        Ok(Fields { path, obj })
    }

    fn invalid(&self, field: &str, reason: impl Into<String>) -> FormatError {
        FormatError::InvalidField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// The field, treating JSON `null` as absent.
    pub fn get(&self, field: &str) -> Option<&'a Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    pub fn opt_usize(&self, field: &str) -> Result<Option<usize>, FormatError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => as_usize(v).map(Some).ok_or_else(|| {
                self.invalid(field, format!("expected a non-negative integer, got {v}"))
            }),
        }
    }

    pub fn usize(&self, field: &str) -> Result<usize, FormatError> {
        self.opt_usize(field)?
            .ok_or_else(|| FormatError::MissingField {
                path: self.path.to_path_buf(),
                field: field.to_string(),
            })
    }

    pub fn opt_f64(&self, field: &str) -> Result<Option<f64>, FormatError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.invalid(field, format!("expected a finite number, got {v}"))),
        }
    }

    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>, FormatError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.invalid(field, format!("expected true or false, got {v}"))),
        }
    }

    pub fn opt_str(&self, field: &str) -> Result<Option<&'a str>, FormatError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.invalid(field, format!("expected a string, got {v}"))),
        }
    }

    /// Token ids are written as one integer or a list of integers.
    pub fn token_ids(&self, field: &str) -> Result<Vec<u32>, FormatError> {
        let bad = || self.invalid(field, "expected a token id or a list of token ids");
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(|v| as_u32(v).ok_or_else(bad)).collect(),
            Some(v) => Ok(vec![as_u32(v).ok_or_else(bad)?]),
        }
    }

    pub fn object(&self, field: &str) -> Result<Option<Fields<'a>>, FormatError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) if v.is_object() => Ok(Some(Fields {
                path: self.path,
                obj: v,
            })),
            Some(v) => Err(self.invalid(field, format!("expected an object, got {v}"))),
        }
    }
}

/// Integers sometimes arrive as `2.0`; accept those but nothing fractional or negative.
fn as_usize(v: &Value) -> Option<usize> {
    if let Some(u) = v.as_u64() {
        return usize::try_from(u).ok();
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 9.0e15).then_some(f as usize)
}

fn as_u32(v: &Value) -> Option<u32> {
    as_usize(v).and_then(|u| u32::try_from(u).ok())
}

/// The first key that appears twice in a JSON object (`serde_json::Value` silently keeps the
/// last one, so a crafted header could hide a tensor entry behind another).
pub fn duplicate_key(json: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            // Every entry is consumed: serde_json refuses a map left half-read.
            let (mut seen, mut first) = (std::collections::HashSet::new(), None);
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                if first.is_none() && !seen.insert(k.clone()) {
                    first = Some(k);
                }
            }
            Ok(first)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    de.deserialize_map(Keys).ok().flatten()
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_a_repeated_key() {
        assert_eq!(
            super::duplicate_key(br#"{"a": 1, "b": {"a": 2}, "a": 3}"#),
            Some("a".into())
        );
        assert_eq!(super::duplicate_key(br#"{"a": 1, "b": 2}"#), None);
    }
}
