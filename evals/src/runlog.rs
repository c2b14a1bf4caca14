//! A resumable results log: one JSON object per finished item, one line each.
//!
//! A line is written with a single `write` on a file opened for appending and synced before
//! the next item starts, so a run killed at any point leaves whole lines plus at most one torn
//! last line. Opening the log again reads the whole lines back (the caller skips those items),
//! cuts the torn line off, and appends after it: a resumed run ends with the same records, and
//! so the same scores, as one that was never interrupted.

use crate::EvalError;
use serde::Serialize;
use serde_json::{Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A finished item read back from the log, with its line number for error messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Logged {
    pub line: usize,
    pub record: Map<String, Value>,
}

pub struct RunLog {
    path: PathBuf,
    file: File,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> EvalError + '_ {
    move |source| EvalError::Io {
        path: path.to_owned(),
        source,
    }
}

impl RunLog {
    /// Opens `path` (creating it), returning the log and the records already in it. Every
    /// record must carry the same values as `identity` for its keys (e.g. the task and the
    /// model), so that a log is never resumed by a different run.
    pub fn open(
        path: impl AsRef<Path>,
        identity: &Map<String, Value>,
    ) -> Result<(RunLog, Vec<Logged>), EvalError> {
        let path = path.as_ref();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io(path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io(path))?;
        let (records, keep) = parse(&bytes, path, identity)?;
        if keep == bytes.len() && bytes.last().is_some_and(|&b| b != b'\n') {
            // A complete last record missing its newline (edited by hand): end its line.
            file.write_all(b"\n").map_err(io(path))?;
        } else if keep < bytes.len() {
            // A torn last line (the run was killed while writing it): drop it, so the next
            // record starts on a line of its own.
            file.set_len(keep as u64).map_err(io(path))?;
            file.seek(SeekFrom::End(0)).map_err(io(path))?;
        }
        Ok((
            RunLog {
                path: path.to_owned(),
                file,
            },
            records,
        ))
    }

    /// Appends one record as one line and syncs it to disk.
    pub fn append(&mut self, record: &impl Serialize) -> Result<(), EvalError> {
        let mut line = serde_json::to_vec(record)
            .map_err(|e| EvalError::Invalid(format!("{}: {e}", self.path.display())))?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(io(&self.path))?;
        self.file.sync_data().map_err(io(&self.path))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a log's finished records without opening it for writing (a torn last line, from a
/// run killed while writing it, is not a finished record and is left out).
pub fn read(path: impl AsRef<Path>) -> Result<Vec<Logged>, EvalError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(io(path))?;
    records(&bytes, path)
}

/// The finished records of a log's bytes (`path` names it in errors), as [`read`] gives them.
pub fn records(bytes: &[u8], path: &Path) -> Result<Vec<Logged>, EvalError> {
    Ok(parse(bytes, path, &Map::new())?.0)
}

/// Parses the log's lines; returns the records and how many bytes are whole lines (a last
/// line without its newline is kept only if it is a complete JSON object, which a torn write
/// never is: a proper prefix of an object lacks its closing brace).
fn parse(
    bytes: &[u8],
    path: &Path,
    identity: &Map<String, Value>,
) -> Result<(Vec<Logged>, usize), EvalError> {
    let mut records = Vec::new();
    let mut start = 0;
    let mut line_no = 0;
    while start < bytes.len() {
        line_no += 1;
        let (end, complete) = match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(n) => (start + n, true),
            None => (bytes.len(), false),
        };
        let raw = &bytes[start..end];
        let parsed = std::str::from_utf8(raw)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(s).ok());
        match parsed {
            Some(Value::Object(record)) => {
                check_identity(&record, identity, path, line_no)?;
                records.push(Logged {
                    line: line_no,
                    record,
                });
            }
            _ if !complete => return Ok((records, start)),
            _ if raw.iter().all(u8::is_ascii_whitespace) => {}
            _ => {
                return Err(EvalError::Data {
                    path: path.to_owned(),
                    line: line_no,
                    message: "not a JSON object (a results log holds one per line)".into(),
                })
            }
        }
        start = end + 1;
    }
    Ok((records, bytes.len()))
}

fn check_identity(
    record: &Map<String, Value>,
    identity: &Map<String, Value>,
    path: &Path,
    line: usize,
) -> Result<(), EvalError> {
    for (key, want) in identity {
        let got = record.get(key).unwrap_or(&Value::Null);
        if got != want {
            return Err(EvalError::Data {
                path: path.to_owned(),
                line,
                message: format!(
                    "written with {key} {got}, this run has {key} {want}: resume with the same \
                     settings or write to another --out file"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn identity() -> Map<String, Value> {
        json!({"task": "t"})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn torn_last_line_is_dropped_and_appending_resumes_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(
            &path,
            "{\"task\":\"t\",\"id\":0}\n{\"task\":\"t\",\"id\":1,\"resp",
        )
        .unwrap();
        let (mut log, got) = RunLog::open(&path, &identity()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].record["id"], 0);
        log.append(&json!({"task": "t", "id": 1})).unwrap();
        drop(log);
        let (_, got) = RunLog::open(&path, &identity()).unwrap();
        let ids: Vec<_> = got.iter().map(|l| l.record["id"].clone()).collect();
        assert_eq!(ids, [json!(0), json!(1)]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn torn_multibyte_character_and_missing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut bytes = b"{\"task\":\"t\",\"id\":0}\n{\"task\":\"t\",\"r\":\"".to_vec();
        bytes.extend_from_slice(&"é".as_bytes()[..1]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(RunLog::open(&path, &identity()).unwrap().1.len(), 1);
        std::fs::write(&path, "{\"task\":\"t\",\"id\":0}").unwrap();
        let (mut log, got) = RunLog::open(&path, &identity()).unwrap();
        assert_eq!(got.len(), 1);
        log.append(&json!({"task": "t", "id": 1})).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "{\"task\":\"t\",\"id\":0}\n{\"task\":\"t\",\"id\":1}\n"
        );
    }

    #[test]
    fn bad_middle_line_and_other_task_are_errors_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "{\"task\":\"t\"}\nnot json\n{\"task\":\"t\"}\n").unwrap();
        let e = RunLog::open(&path, &identity()).err().unwrap().to_string();
        assert!(
            e.ends_with("log.jsonl:2: not a JSON object (a results log holds one per line)"),
            "{e}"
        );
        std::fs::write(&path, "{\"task\":\"t\"}\n{\"task\":\"u\"}\n").unwrap();
        let e = RunLog::open(&path, &identity()).err().unwrap().to_string();
        assert!(e.contains("log.jsonl:2: written with task \"u\""), "{e}");
    }
}
