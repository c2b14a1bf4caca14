//! A custom task's rows: JSONL objects or CSV records (header row), each with its 1-based line
//! for messages.

use crate::EvalError;
use serde_json::{Map, Value};
use std::path::Path;

#[derive(Clone, Debug)]
pub struct Row {
    pub line: usize,
    pub fields: Map<String, Value>,
}

pub fn load_rows(path: &Path) -> Result<Vec<Row>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |line: usize, message: String| EvalError::Data {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut rows = Vec::new();
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
        let header = reader
            .headers()
            .map_err(|e| bad(1, format!("CSV header: {e}")))?
            .clone();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line() as usize);
                bad(line, format!("CSV: {e}"))
            })?;
            let line = record.position().map_or(0, |p| p.line() as usize);
            let fields = header
                .iter()
                .zip(record.iter())
                .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                .collect();
            rows.push(Row { line, fields });
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let fields: Map<String, Value> = serde_json::from_str(line)
                .map_err(|e| bad(i + 1, format!("not a JSON object: {e}")))?;
            rows.push(Row {
                line: i + 1,
                fields,
            });
        }
    }
    if rows.is_empty() {
        return Err(EvalError::Invalid(format!("{}: no rows", path.display())));
    }
    Ok(rows)
}
