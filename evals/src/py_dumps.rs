//! Python's `json.dumps(x)` with its defaults (`ensure_ascii=True`, separators `", "` and
//! `": "`), so files written in a reference implementation's own format are byte-identical to
//! what it writes. Keys keep insertion order (serde_json's `preserve_order`).

use serde_json::Value;
use std::fmt::Write;

pub fn dumps(v: &Value) -> String {
    let mut out = String::new();
    write_value(v, &mut out);
    out
}

fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Integers print alike; floats are rare in these files (Python prints repr, e.g. 1.5,
        // 1e-05; serde_json prints the shortest round-trip form, which agrees on them).
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(x, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(k, out);
                out.push_str(": ");
                write_value(x, out);
            }
            out.push('}');
        }
    }
}

/// A JSON string as Python's `ensure_ascii` encoder writes it: everything outside `' '..='~'`
/// escaped, astral characters as surrogate pairs, lowercase hex.
fn write_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_python_json_dumps() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"instruction_id_list": ["a:b"], "prompt": "Hi \"x\"\n\t\u0001\u007f é 中 🙂 \\", "response": "", "follow_all_instructions": true, "follow_instruction_list": [true, false], "n": null, "f": 1.5}"#,
        )
        .unwrap();
        // Printed by Python 3.11's json.dumps of the same object.
        let python = r#"{"instruction_id_list": ["a:b"], "prompt": "Hi \"x\"\n\t\u0001\u007f \u00e9 \u4e2d \ud83d\ude42 \\", "response": "", "follow_all_instructions": true, "follow_instruction_list": [true, false], "n": null, "f": 1.5}"#;
        assert_eq!(super::dumps(&v), python);
    }
}
