//! HumanEval and MBPP requests against lm-eval 0.4.13's own task classes (humaneval,
//! humaneval_instruct, mbpp, mbpp_instruct): the context string, or for the chat tasks the
//! messages and whether the answer continues a started assistant message; the stop strings and
//! the token budget. Also mbpp_instruct's answer filter against lm-eval's on responses of every
//! shape. scripts/make-code-requests.sh writes the committed sample (with its problems, so it
//! runs anywhere) and, with the data present, data/code_reference/ for every item.

use pocket_evals::code::problems::{Problem, Problems};
use pocket_evals::code::tasks::{extract_code_blocks, CodeTask};
use pocket_evals::{GenRequest, Prompt};
use serde_json::{json, Value};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// lm-eval's context as pocket's request renders it: the text, or the recorded chat call.
fn as_reference(req: &GenRequest) -> Value {
    let turns = |m: &[pocket_evals::ChatMessage]| -> Vec<Value> {
        m.iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect()
    };
    match &req.prompt {
        Prompt::Text(t) => json!(t),
        Prompt::Chat(m) => json!({"messages": turns(m), "add_generation_prompt": true}),
        Prompt::ChatContinued(m, prefix) => {
            let mut all = turns(m);
            all.push(json!({"role": "assistant", "content": prefix}));
            json!({"messages": all, "add_generation_prompt": false})
        }
    }
}

fn compare(task: CodeTask, problem: &Problem, want: &Value, wrong: &mut Vec<String>) {
    let req = task.request(problem);
    let what = format!("{} {}", task.name(), problem.task_id);
    let got = as_reference(&req);
    if got != want["context"] {
        wrong.push(format!(
            "{what}: context\n  lm-eval {}\n  pocket  {got}",
            want["context"]
        ));
    }
    let until: Vec<String> = want["until"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    if until != req.until || want["max_gen_toks"].as_u64() != Some(req.max_gen_toks as u64) {
        wrong.push(format!(
            "{what}: until/max_gen_toks {} {} vs {:?} {}",
            want["until"], want["max_gen_toks"], req.until, req.max_gen_toks
        ));
    }
}

fn problem(v: &Value) -> Problem {
    let row = v.as_object().unwrap().clone();
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    Problem {
        task_id: s("task_id"),
        prompt: s("prompt"),
        test: s("test"),
        entry_point: s("entry_point"),
        canonical_solution: v["canonical_solution"].as_str().map(String::from),
        row,
    }
}

#[test]
fn the_committed_sample_equals_lm_eval() {
    let text = std::fs::read_to_string(root().join("tests/fixtures/code_requests.jsonl")).unwrap();
    let mut wrong = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for line in text.lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let name = row["task"].as_str().unwrap();
        *seen.entry(name.to_string()).or_insert(0) += 1;
        if name == "extract_code_blocks" {
            let got = extract_code_blocks(row["response"].as_str().unwrap());
            if got != row["extracted"].as_str().unwrap() {
                wrong.push(format!(
                    "extract_code_blocks({}): lm-eval {}, pocket {got:?}",
                    row["response"], row["extracted"]
                ));
            }
            continue;
        }
        let task = CodeTask::parse(name).unwrap();
        compare(task, &problem(&row["problem"]), &row, &mut wrong);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every task and the filter are in the sample.
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen["extract_code_blocks"] >= 20);
}

/// Every item against lm-eval's own requests (tier lm-eval-requests: data/ and
/// data/code_reference/ from `scripts/make-code-requests.sh`, with lm-eval).
#[test]
#[ignore = "tier lm-eval-requests: needs data/code_reference (scripts/make-code-requests.sh, with lm-eval)"]
fn every_item_equals_lm_eval() {
    let data = root().join("../data");
    let reference = data.join("code_reference");
    assert!(
        reference.join("mbpp_instruct.jsonl").is_file(),
        "tier lm-eval-requests: {} is missing (scripts/make-code-requests.sh)",
        reference.join("mbpp_instruct.jsonl").display()
    );
    let humaneval = Problems::read(&data.join("humaneval/HumanEval.jsonl")).unwrap();
    let mbpp = Problems::read(&data.join("mbpp/test.jsonl")).unwrap();
    let mut wrong = Vec::new();
    for task in CodeTask::ALL {
        let problems = if task.is_mbpp() { &mbpp } else { &humaneval };
        let text =
            std::fs::read_to_string(reference.join(format!("{}.jsonl", task.name()))).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), problems.list.len(), "{}", task.name());
        for want in &rows {
            let p = problems.get(want["task_id"].as_str().unwrap()).unwrap();
            compare(task, p, want, &mut wrong);
        }
        eprintln!("{}: {} requests compared", task.name(), rows.len());
    }
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(5)].join("\n")
    );
}
