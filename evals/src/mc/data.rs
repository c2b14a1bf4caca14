//! Multiple-choice items from a user's file: JSONL or CSV with a question, its choices (a
//! `choices` list, or one column per letter `A`, `B`, `C`, …) and the answer (a 0-based
//! index, a letter, or the text of the right choice). An `id` column is optional.

use crate::EvalError;
use serde_json::{Map, Value};
use std::path::Path;

/// One question.
#[derive(Clone, Debug, PartialEq)]
pub struct McItem {
    /// The `id` given in the file, else the 0-based item index.
    pub id: Value,
    pub question: String,
    pub choices: Vec<String>,
    /// Index of the right choice.
    pub answer: usize,
    /// 1-based line (JSONL) or record line (CSV), for messages.
    pub line: usize,
}

fn data(path: &Path, line: usize, message: impl Into<String>) -> EvalError {
    EvalError::Data {
        path: path.to_owned(),
        line,
        message: message.into(),
    }
}

/// Reads a `.csv` file as CSV with a header row, anything else as JSONL.
pub fn load_items(path: impl AsRef<Path>) -> Result<Vec<McItem>, EvalError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_owned(),
        source,
    })?;
    let is_csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let items = if is_csv {
        parse_csv(&text, path)?
    } else {
        parse_jsonl(&text, path)?
    };
    if items.is_empty() {
        return Err(EvalError::Invalid(format!(
            "{}: no questions",
            path.display()
        )));
    }
    Ok(items)
}

/// JSONL: `{"question": str, "choices": [str, ...] | "A": str, "B": str, ..., "answer": int |
/// str, "id"?: any}` per line.
pub fn parse_jsonl(text: &str, path: &Path) -> Result<Vec<McItem>, EvalError> {
    let mut items = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: Map<String, Value> = serde_json::from_str(line)
            .map_err(|e| data(path, i + 1, format!("not a JSON object: {e}")))?;
        let field = |name: &str| -> Option<String> {
            row.get(name).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        let choices = match row.get("choices") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|c| c.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| data(path, i + 1, "\"choices\" must be a list of strings"))?,
            Some(_) => return Err(data(path, i + 1, "\"choices\" must be a list of strings")),
            None => letter_columns(|l| field(l)),
        };
        let id = row.get("id").cloned().unwrap_or(Value::from(items.len()));
        let answer = row.get("answer").map(|v| match v {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        items.push(build(path, i + 1, id, field("question"), choices, answer)?);
    }
    Ok(items)
}

/// CSV with a header: `question`, then `choices` (a JSON list) or `A`, `B`, … columns, and
/// `answer`; `id` optional. Header names are matched case-insensitively.
pub fn parse_csv(text: &str, path: &Path) -> Result<Vec<McItem>, EvalError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| data(path, 1, format!("CSV header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let col = |name: &str| header.iter().position(|h| h.eq_ignore_ascii_case(name));
    let mut items = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            data(path, line, format!("CSV: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let get = |name: &str| col(name).and_then(|c| record.get(c)).map(str::to_string);
        let choices = match get("choices") {
            Some(list) => serde_json::from_str::<Vec<String>>(&list).map_err(|e| {
                data(
                    path,
                    line,
                    format!("\"choices\" must be a JSON list of strings: {e}"),
                )
            })?,
            None => letter_columns(|l| get(l)),
        };
        let id = get("id").map_or(Value::from(items.len()), Value::from);
        items.push(build(
            path,
            line,
            id,
            get("question"),
            choices,
            get("answer"),
        )?);
    }
    Ok(items)
}

/// Choices from columns `A`, `B`, … up to the first missing or empty one (a CSV row of a
/// 3-choice question in a file with a `D` column leaves `D` empty).
fn letter_columns(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    ('A'..='Z')
        .map_while(|l| get(&l.to_string()).filter(|s| !s.is_empty()))
        .collect()
}

fn build(
    path: &Path,
    line: usize,
    id: Value,
    question: Option<String>,
    choices: Vec<String>,
    answer: Option<String>,
) -> Result<McItem, EvalError> {
    let question = question.ok_or_else(|| data(path, line, "no \"question\""))?;
    if choices.len() < 2 {
        return Err(data(
            path,
            line,
            "needs at least 2 choices: a \"choices\" list or columns A, B, ...",
        ));
    }
    if let Some(k) = choices.iter().position(|c| c.is_empty()) {
        return Err(data(path, line, format!("choice {k} is empty")));
    }
    let answer = answer.ok_or_else(|| data(path, line, "no \"answer\""))?;
    let index = answer_index(&answer, &choices).ok_or_else(|| {
        data(
            path,
            line,
            format!(
                "answer {answer:?} is not a 0-based index below {}, a letter A-{} or one of the choices",
                choices.len(),
                (b'A' + choices.len() as u8 - 1) as char
            ),
        )
    })?;
    Ok(McItem {
        id,
        question,
        choices,
        answer: index,
        line,
    })
}

/// `2` → 2, `"C"` → 2, or the position of a choice equal to the text.
fn answer_index(answer: &str, choices: &[String]) -> Option<usize> {
    let a = answer.trim();
    if let Ok(i) = a.parse::<usize>() {
        return (i < choices.len()).then_some(i);
    }
    let mut chars = a.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        if c.is_ascii_uppercase() && ((c as u8 - b'A') as usize) < choices.len() {
            return Some((c as u8 - b'A') as usize);
        }
    }
    choices.iter().position(|c| c == answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_and_csv_forms_agree() {
        let p = Path::new("q.jsonl");
        let j = parse_jsonl(
            "{\"question\": \"2+2?\", \"choices\": [\"3\", \"4\"], \"answer\": 1}\n\
             {\"id\": \"x\", \"question\": \"Sky?\", \"A\": \"green\", \"B\": \"blue\", \"answer\": \"B\"}\n\
             {\"question\": \"Cat?\", \"choices\": [\"meow\", \"woof\"], \"answer\": \"meow\"}\n",
            p,
        )
        .unwrap();
        assert_eq!(j.iter().map(|i| i.answer).collect::<Vec<_>>(), [1, 1, 0]);
        assert_eq!(j[1].id, "x");
        assert_eq!(j[2].id, 2);
        let c = parse_csv(
            "id,Question,A,B,C,answer\n7,\"Pick, one\",a,b,c,C\n8,Two?,x,\"y \"\"q\"\"\",z,0\n",
            Path::new("q.csv"),
        )
        .unwrap();
        assert_eq!(c[0].question, "Pick, one");
        assert_eq!(c[0].answer, 2);
        assert_eq!(c[1].choices[1], "y \"q\"");
        assert_eq!(c[1].id, "8");
        let l = parse_csv(
            "question,choices,answer\nQ,\"[\"\"a\"\",\"\"b\"\"]\",b\n",
            p,
        )
        .unwrap();
        assert_eq!(l[0].choices, ["a", "b"]);
        assert_eq!(l[0].answer, 1);
    }

    #[test]
    fn bad_rows_name_the_line() {
        let p = Path::new("q.jsonl");
        let e = parse_jsonl("{\"question\": \"a\", \"choices\": [\"x\", \"y\"], \"answer\": 0}\n{\"question\": \"b\", \"choices\": [\"x\", \"y\"], \"answer\": \"D\"}\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("q.jsonl:2: answer \"D\" is not"), "{e}");
        let e = parse_jsonl("{\"question\": \"a\", \"A\": \"x\", \"answer\": 0}", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("q.jsonl:1: needs at least 2 choices"), "{e}");
        let e = parse_csv("question,A,B,answer\nq,a,b,1\nq,a,b\n", Path::new("q.csv"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("q.csv:3: CSV:"), "{e}");
    }
}
