//! The BBH `get-answer` filter against lm-eval 0.4.13's own `RegexFilter` + `TakeFirstFilter`
//! on 1,200 committed responses built around BBH's targets (scripts/make-bbh-corpus.sh).

use pocket_evals::bbh::answer;
use serde_json::Value;

#[test]
fn answers_equal_lm_evals_filter() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bbh_filter_reference.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut wrong = Vec::new();
    let mut n = 0;
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let response = r["response"].as_str().unwrap();
        let got = answer(response);
        n += 1;
        if got != r["answer"].as_str().unwrap() {
            wrong.push(format!(
                "{response:?}: reference {}, pocket {got:?}",
                r["answer"]
            ));
        }
    }
    assert!(n >= 1000, "{n}");
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
