//! MMLU (5-shot), ARC-Challenge, HellaSwag and GPQA Diamond requests against lm-eval 0.4.13's
//! own task classes, string for string: the context and every continuation, and the gold
//! index. The committed sample carries its documents, so it runs anywhere; with the data and
//! the full reference present (scripts/make-mc-corpus.sh writes data/mc_reference/), every
//! item of the four sets is compared too.

use pocket_evals::mc::benchmarks::{
    self, arc_request, gpqa_request, hellaswag_request, mmlu_request, Benchmark,
};
use pocket_evals::mc::McRequest;
use serde_json::Value;
use std::path::PathBuf;

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn compare(what: &str, got: &McRequest, gold: usize, want: &Value, wrong: &mut Vec<String>) {
    let context = want["context"].as_str().unwrap();
    if got.context != context {
        wrong.push(format!(
            "{what}: context\n  lm-eval {context:?}\n  pocket  {:?}",
            got.context
        ));
    }
    let conts = strings(&want["continuations"]);
    if got.continuations != conts {
        wrong.push(format!(
            "{what}: continuations {conts:?} vs {:?}",
            got.continuations
        ));
    }
    if want["gold"].as_u64() != Some(gold as u64) {
        wrong.push(format!("{what}: gold {} vs {gold}", want["gold"]));
    }
}

#[test]
fn the_committed_sample_equals_lm_evals_requests() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/mc_requests.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut wrong = Vec::new();
    let mut per_task = std::collections::BTreeMap::<String, usize>::new();
    for (i, line) in text.lines().enumerate() {
        let r: Value = serde_json::from_str(line).unwrap();
        let task = r["task"].as_str().unwrap();
        let doc = r["doc"].clone();
        let (req, gold) = match task {
            "mmlu" => {
                let d: benchmarks::MmluDoc = serde_json::from_value(doc).unwrap();
                let shots: Vec<benchmarks::MmluDoc> =
                    serde_json::from_value(r["fewshot"].clone()).unwrap();
                (mmlu_request(&d, &shots), d.answer)
            }
            "arc_challenge" => {
                let d: benchmarks::ArcDoc = serde_json::from_value(doc).unwrap();
                let gold = d
                    .choices
                    .label
                    .iter()
                    .position(|l| *l == d.answer_key)
                    .unwrap();
                (arc_request(&d), gold)
            }
            "hellaswag" => {
                let d: benchmarks::HellaSwagDoc = serde_json::from_value(doc).unwrap();
                let gold = d.label.parse().unwrap();
                (hellaswag_request(&d), gold)
            }
            "gpqa" => {
                let d: benchmarks::GpqaDoc = serde_json::from_value(doc).unwrap();
                (gpqa_request(&d), d.answer)
            }
            other => panic!("line {}: task {other}", i + 1),
        };
        *per_task.entry(task.to_string()).or_default() += 1;
        compare(
            &format!("{task} line {}", i + 1),
            &req,
            gold,
            &r,
            &mut wrong,
        );
    }
    assert_eq!(per_task.len(), 4, "{per_task:?}");
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Every item, when data/ holds the sets and lm-eval's requests for them.
#[test]
fn every_item_equals_lm_evals_requests_when_the_data_is_here() {
    let data = std::env::var_os("POCKET_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data")));
    let reference = data.join("mc_reference");
    if !reference.join("gpqa.jsonl").exists() {
        eprintln!(
            "skipped: no {} (scripts/make-mc-corpus.sh)",
            reference.display()
        );
        return;
    }
    let mut wrong = Vec::new();
    for bench in Benchmark::ALL {
        let items = benchmarks::load(bench, &data).unwrap();
        let text =
            std::fs::read_to_string(reference.join(format!("{}.jsonl", bench.name()))).unwrap();
        let want: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(items.len(), want.len(), "{}", bench.name());
        for (it, w) in items.iter().zip(&want) {
            compare(
                &format!("{} {}", bench.name(), it.id),
                &it.request,
                it.gold,
                w,
                &mut wrong,
            );
        }
        eprintln!("{}: {} items equal lm-eval's", bench.name(), items.len());
    }
    wrong.truncate(20);
    assert!(wrong.is_empty(), "differ:\n{}", wrong.join("\n"));
}
