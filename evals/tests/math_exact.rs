//! The MATH answer functions against lm-eval 0.4.13's own `minerva_math/utils.py`, string for
//! string, on a committed corpus of 6,620 inputs (the MATH-500 solutions and their boxed
//! answers, responses built from those answers with units, dollars, boxes, `\text`, equations,
//! and hand-written edge cases). Made by scripts/make-math-corpus.sh.

use pocket_evals::math::normalize::{
    get_unnormalized_answer, gold_answer, last_boxed_only_string, normalize_final_answer,
    remove_boxed,
};
use serde_json::Value;

#[test]
fn answer_handling_equals_lm_evals_minerva_math() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/math_reference.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut wrong = Vec::new();
    let mut n = 0;
    let mut check = |what: &str, input: &str, want: &Value, got: Option<String>| {
        n += 1;
        let got = got.map(Value::String).unwrap_or(Value::Null);
        if &got != want {
            wrong.push(format!("{what}({input:?}): reference {want}, pocket {got}"));
        }
    };
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let input = r["input"].as_str().unwrap();
        let boxed = last_boxed_only_string(input);
        check(
            "last_boxed_only_string",
            input,
            &r["last_boxed_only_string"],
            boxed.clone(),
        );
        check(
            "remove_boxed",
            input,
            &r["remove_boxed"],
            boxed.as_deref().and_then(remove_boxed),
        );
        if r["kind"] == "solution" {
            check("gold", input, &r["gold"], gold_answer(input));
            continue;
        }
        let unnorm = get_unnormalized_answer(input);
        check(
            "get_unnormalized_answer",
            input,
            &r["get_unnormalized_answer"],
            Some(unnorm.clone()),
        );
        check(
            "normalize_final_answer",
            input,
            &r["normalize_final_answer"],
            Some(normalize_final_answer(input)),
        );
        check(
            "normalize(unnormalized)",
            input,
            &r["normalize_unnormalized"],
            Some(normalize_final_answer(&unnorm)),
        );
    }
    eprintln!("{n} strings checked, {} differ", wrong.len());
    assert!(n > 2000);
    assert!(
        wrong.is_empty(),
        "{}\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
