//! GSM8K scoring and prompts against lm-evaluation-harness 0.4.13 itself: the fixtures were
//! written by `scripts/gsm8k_reference.py`, which runs the harness's own filter pipelines,
//! `process_results` (exact match) and `fewshot_context` on tasks built from its yaml files
//! (`scripts/make-gsm8k-reference.sh`).

use pocket_evals::gsm8k::{exemplars_for, Task, Variant};
use pocket_evals::{ChatMessage, Prompt};
use serde::Deserialize;
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Deserialize)]
struct Completion {
    id: usize,
    variant: String,
    response: String,
    answer: String,
}

#[derive(Deserialize)]
struct Reference {
    id: usize,
    strict: String,
    strict_exact_match: f64,
    flexible: String,
    flexible_exact_match: f64,
}

#[test]
fn every_verdict_equals_lm_evals() {
    let completions: Vec<Completion> = fixture("gsm8k_completions.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reference: Vec<Reference> = fixture("gsm8k_reference_verdicts.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(completions.len(), reference.len());
    assert!(completions.len() >= 2000);
    let mut mismatches = Vec::new();
    let (mut strict_right, mut flexible_right) = (0, 0);
    for (c, r) in completions.iter().zip(&reference) {
        assert_eq!(c.id, r.id);
        let variant = Variant::parse(&c.variant).unwrap();
        let v = Task::get(variant).unwrap().score(&c.response, &c.answer);
        let want_strict = r.strict_exact_match == 1.0;
        let want_flexible = r.flexible_exact_match == 1.0;
        strict_right += usize::from(want_strict);
        flexible_right += usize::from(want_flexible);
        if v.strict != r.strict
            || v.flexible != r.flexible
            || v.strict_match != want_strict
            || v.flexible_extract != want_flexible
        {
            mismatches.push(format!(
                "id {} ({}) {:?}: ours {:?}/{:?} {}/{}, lm-eval {:?}/{:?} {want_strict}/{want_flexible}",
                c.id,
                c.variant,
                c.response,
                v.strict,
                v.flexible,
                v.strict_match,
                v.flexible_extract,
                r.strict,
                r.flexible
            ));
        }
    }
    // Both outcomes are well represented, so agreement is not trivial.
    assert!(
        strict_right > 50 && flexible_right > 500,
        "{strict_right} {flexible_right}"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        completions.len(),
        mismatches[..mismatches.len().min(20)].join("\n")
    );
}

#[derive(Deserialize)]
struct PromptRef {
    variant: String,
    question: String,
    text: String,
    messages: Option<Vec<ChatMessage>>,
    until: Vec<String>,
}

#[test]
fn prompts_equal_fewshot_context() {
    let rows: Vec<PromptRef> = fixture("gsm8k_reference_prompts.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 12);
    for r in rows {
        let variant = Variant::parse(&r.variant).unwrap();
        let task = Task::get(variant).unwrap();
        let request = task.request(&r.question, &exemplars_for(variant, None).unwrap());
        assert_eq!(request.until, r.until);
        match (request.prompt, r.messages) {
            (Prompt::Chat(ours), Some(theirs)) => assert_eq!(ours, theirs, "{}", r.variant),
            (Prompt::Text(ours), None) => assert_eq!(ours, r.text, "{}", r.variant),
            (ours, theirs) => panic!("{}: {ours:?} vs {theirs:?}", r.variant),
        }
    }
}
