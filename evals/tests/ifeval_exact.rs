//! Exactness of the IFEval port: every verdict, sentence and token equals the pinned Python
//! reference's (lm-eval 0.4.13, nltk 3.10.4, langdetect 1.0.9 seeded 0, CPython 3.11), as
//! recorded in `tests/fixtures/` by `scripts/make-ifeval-fixtures.sh`.

use std::path::PathBuf;

use pocket_evals::ifeval::{self, punkt, word_tokenize};
use serde::Deserialize;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A JSON-lines fixture (a bare name) or any file (a path with a separator).
fn jsonl<T: for<'de> Deserialize<'de>>(name: &str) -> Vec<T> {
    let path = if name.contains('/') {
        PathBuf::from(name)
    } else {
        fixture(name)
    };
    let text = std::fs::read_to_string(&path).expect("fixture readable");
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

/// Scores `responses` and compares every verdict with `reference` (at least `min` of them);
/// returns the report.
fn compare_verdicts(responses: &str, reference: &str, min: usize) -> ifeval::Report {
    let items = ifeval::load_inputs(fixture("ifeval_input_data.jsonl")).expect("inputs load");
    assert_eq!(items.len(), 541);
    let path = if responses.contains('/') {
        PathBuf::from(responses)
    } else {
        fixture(responses)
    };
    let rows = ifeval::load_responses(path).expect("responses load");
    let expected: Vec<ReferenceVerdict> = jsonl(reference);
    assert_eq!(rows.len(), expected.len());

    let report = ifeval::score_rows(&items, &rows).expect("rows score");
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for (got, want) in report.verdicts.iter().zip(&expected) {
        assert_eq!((got.row, got.key), (want.row, want.key));
        for (level, g, w) in [
            ("strict", &got.strict, &want.strict),
            ("loose", &got.loose, &want.loose),
        ] {
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
    eprintln!(
        "{} rows, {compared} verdicts compared, {} differ",
        rows.len(),
        mismatches.len()
    );
    assert!(compared >= min, "compared only {compared} verdicts");
    assert!(
        mismatches.is_empty(),
        "{} of {compared} verdicts differ:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    report
}

/// Also compares `$IFEVAL_RESPONSES` with `$IFEVAL_REFERENCE_VERDICTS` when both are set
/// (files written like the fixtures, for stress runs too big to commit).
#[test]
fn every_verdict_equals_the_python_reference() {
    let report = compare_verdicts(
        "ifeval_responses.jsonl",
        "ifeval_reference_verdicts.jsonl",
        10_000,
    );
    assert!(
        report.rows > 4000,
        "the fixture should hold thousands of rows"
    );
    if let (Ok(responses), Ok(reference)) = (
        std::env::var("IFEVAL_RESPONSES"),
        std::env::var("IFEVAL_REFERENCE_VERDICTS"),
    ) {
        compare_verdicts(&responses, &reference, 1);
    }
    // Both outcomes of every instruction occur, so each check is exercised both ways.
    for (id, stats) in &report.per_instruction {
        assert!(
            stats.strict_followed > 0 && stats.strict_followed < stats.count,
            "{id} is one-sided"
        );
    }
    assert_eq!(report.per_instruction.len(), ifeval::INSTRUCTION_IDS.len());
}

/// A real model's answers, not written to probe the checkers: SmolLM2-135M-Instruct's default
/// Q4 build on all 541 prompts (scripts/make-ifeval-smollm2-fixture.sh), every instruction
/// verdict equal to the Python reference's.
#[test]
fn smollm2_verdicts_equal_the_python_reference() {
    let report = compare_verdicts(
        "ifeval_smollm2_responses.jsonl",
        "ifeval_smollm2_reference_verdicts.jsonl",
        1_600,
    );
    assert_eq!(report.rows, 541);
}

#[derive(Deserialize)]
struct TokenizeCase {
    text: String,
    sentences: Vec<String>,
    words: Vec<String>,
    word_count: usize,
}

/// Also compares `$IFEVAL_TOKENIZE_REFERENCE` when set: a larger file written the same way
/// (`ifeval_reference.py tokens`), for stress runs that are too big to commit.
#[test]
fn punkt_and_word_tokenize_equal_nltk() {
    let mut cases: Vec<TokenizeCase> = jsonl("ifeval_tokenize_reference.jsonl");
    assert!(cases.len() > 250);
    if let Ok(extra) = std::env::var("IFEVAL_TOKENIZE_REFERENCE") {
        cases.extend(jsonl::<TokenizeCase>(&extra));
    }
    let mut failures = Vec::new();
    for case in &cases {
        let sentences = punkt::sentences(&case.text);
        if sentences != case.sentences {
            failures.push(format!(
                "sentences of {:?}:\n  rust   {sentences:?}\n  python {:?}",
                case.text, case.sentences
            ));
        }
        let words = word_tokenize::word_tokenize(&case.text);
        if words != case.words {
            failures.push(format!(
                "words of {:?}:\n  rust   {words:?}\n  python {:?}",
                case.text, case.words
            ));
        }
        if ifeval::count_words(&case.text) != case.word_count {
            failures.push(format!(
                "word count of {:?}: python {}",
                case.text, case.word_count
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
