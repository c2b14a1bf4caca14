//! JSON lines read into typed rows, each with its 1-based line number so a bad row's error
//! names the file and line. Blank lines are skipped; a file without rows is an error.

use crate::EvalError;
use serde::de::DeserializeOwned;
use std::path::Path;

pub fn read_rows<T: DeserializeOwned>(path: &Path) -> Result<Vec<(usize, T)>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(line).map_err(|e| EvalError::Data {
            path: path.to_owned(),
            line: i + 1,
            message: e.to_string(),
        })?;
        rows.push((i + 1, row));
    }
    if rows.is_empty() {
        return Err(EvalError::Invalid(format!("{}: no items", path.display())));
    }
    Ok(rows)
}
