//! NaN and infinity in weights. A checkpoint with a NaN in one weight produces NaN logits for
//! every prompt that reaches it, which looks like a broken engine, not a broken file: export
//! refuses such tensors (all of them named in one message) unless the user allows them.

use crate::model_file::ModelFile;
use crate::FormatError;

/// Where the first non-finite value of a tensor is, and how many there are.
#[derive(Clone, Debug, PartialEq)]
pub struct NonFinite {
    pub name: String,
    pub count: usize,
    pub first: usize,
    pub first_value: f32,
}

pub fn scan(name: &str, values: &[f32]) -> Option<NonFinite> {
    let first = values.iter().position(|v| !v.is_finite())?;
    Some(NonFinite {
        name: name.into(),
        count: values.iter().filter(|v| !v.is_finite()).count(),
        first,
        first_value: values[first],
    })
}

/// Checks one tensor's values; on the first bad tensor, scans every tensor of the source so the
/// error names them all.
pub fn check(
    source: &ModelFile,
    name: &str,
    values: &[f32],
    allow: bool,
) -> Result<(), FormatError> {
    if allow || scan(name, values).is_none() {
        return Ok(());
    }
    let mut bad = Vec::new();
    for t in source.tensors() {
        if let Ok(v) = source.read_f32(&t.name) {
            bad.extend(scan(&t.name, &v));
        }
    }
    let list: Vec<String> = bad
        .iter()
        .take(5)
        .map(|b| {
            format!(
                "`{}` ({} values, first {} at index {})",
                b.name, b.count, b.first_value, b.first
            )
        })
        .collect();
    let more = bad.len().saturating_sub(5);
    Err(FormatError::Invalid {
        path: source.path().to_path_buf(),
        reason: format!(
            "{} tensor(s) hold NaN or infinite weights: {}{}; refusing to export (pass --allow-nonfinite to export them anyway)",
            bad.len(),
            list.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ),
    })
}
