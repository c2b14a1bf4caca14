//! Exactness of the IFEval port: every verdict, sentence and token equals the pinned Python
//! reference's (lm-eval 0.4.13, nltk 3.10.4, langdetect 1.0.9 seeded 0, CPython 3.11), as
//! recorded in `tests/fixtures/` by `scripts/make-ifeval-fixtures.sh`.

use std::path::PathBuf;

use pocket_evals::ifeval::{self, punkt, word_tokenize};
use serde::Deserialize;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn jsonl<T: for<'de> Deserialize<'de>>(name: &str) -> Vec<T> {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture readable");
    text.lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1)))
        .collect()
}

#[derive(Deserialize)]
struct ReferenceVerdict {
    row: usize,
    key: i64,
    strict: Vec<bool>,
    loose: Vec<bool>,
}

#[test]
fn every_verdict_equals_the_python_reference() {
    let items = ifeval::load_inputs(fixture("ifeval_input_data.jsonl")).expect("inputs load");
    assert_eq!(items.len(), 541);
    let rows = ifeval::load_responses(fixture("ifeval_responses.jsonl")).expect("responses load");
    let expected: Vec<ReferenceVerdict> = jsonl("ifeval_reference_verdicts.jsonl");
    assert_eq!(rows.len(), expected.len());
    assert!(rows.len() > 4000, "the fixture should hold thousands of rows");

    let report = ifeval::score_rows(&items, &rows).expect("rows score");
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for (got, want) in report.verdicts.iter().zip(&expected) {
        assert_eq!((got.row, got.key), (want.row, want.key));
        for (level, g, w) in [("strict", &got.strict, &want.strict), ("loose", &got.loose, &want.loose)] {
            assert_eq!(g.len(), w.len());
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                compared += 1;
                if a != b {
                    mismatches.push(format!(
                        "row {} key {} {level} {}: rust {a}, python {b}; response {:?}",
                        got.row, got.key, got.instruction_ids[i], rows[got.row].response
                    ));
                }
            }
        }
    }
    eprintln!("{} rows, {compared} verdicts compared, {} differ", rows.len(), mismatches.len());
    assert!(compared > 10_000, "compared only {compared} verdicts");
    assert!(
        mismatches.is_empty(),
        "{} of {compared} verdicts differ:\n{}",
        mismatches.len(),
        mismatches.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    // Both outcomes of every instruction occur, so each check is exercised both ways.
    for (id, stats) in &report.per_instruction {
        assert!(stats.strict_followed > 0 && stats.strict_followed < stats.count, "{id} is one-sided");
    }
    assert_eq!(report.per_instruction.len(), ifeval::INSTRUCTION_IDS.len());
}

#[derive(Deserialize)]
struct TokenizeCase {
    text: String,
    sentences: Vec<String>,
    words: Vec<String>,
    word_count: usize,
}

#[test]
fn punkt_and_word_tokenize_equal_nltk() {
    let cases: Vec<TokenizeCase> = jsonl("ifeval_tokenize_reference.jsonl");
    assert!(cases.len() > 250);
    let mut failures = Vec::new();
    for case in &cases {
        let sentences = punkt::sentences(&case.text);
        if sentences != case.sentences {
            failures.push(format!("sentences of {:?}:\n  rust   {sentences:?}\n  python {:?}", case.text, case.sentences));
        }
        let words = word_tokenize::word_tokenize(&case.text);
        if words != case.words {
            failures.push(format!("words of {:?}:\n  rust   {words:?}\n  python {:?}", case.text, case.words));
        }
        if ifeval::count_words(&case.text) != case.word_count {
            failures.push(format!("word count of {:?}: python {}", case.text, case.word_count));
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.iter().take(15).cloned().collect::<Vec<_>>().join("\n"));
}
