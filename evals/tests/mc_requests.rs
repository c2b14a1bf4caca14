//! MMLU (5-shot), ARC-Challenge, HellaSwag and GPQA Diamond requests against lm-eval 0.4.13's
//! own task classes, string for string: the context and every continuation, and the gold
//! index; and BBH's 27 `bbh_cot_fewshot` generation requests (context, stop strings, token
//! budget, target). The committed sample carries its documents, so it runs anywhere; with the data and
//! the full reference present (scripts/make-mc-corpus.sh writes data/mc_reference/), every
//! item of the four sets is compared too.

use pocket_evals::bbh;
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

/// A BBH request against lm-eval's: context, stop strings, budget and target.
fn compare_bbh(
    what: &str,
    spec: &bbh::Spec,
    subtask: &str,
    doc: &bbh::Sample,
    want: &Value,
    wrong: &mut Vec<String>,
) {
    let req = spec.tasks[subtask].request(spec, &doc.input);
    let pocket_evals::Prompt::Text(context) = &req.prompt else {
        panic!("BBH prompts are plain text")
    };
    if want["context"].as_str() != Some(context.as_str()) {
        wrong.push(format!(
            "{what}: context\n  lm-eval {}\n  pocket  {context:?}",
            want["context"]
        ));
    }
    if strings(&want["until"]) != req.until
        || want["max_gen_toks"].as_u64() != Some(req.max_gen_toks as u64)
    {
        wrong.push(format!(
            "{what}: until/max_gen_toks {} {} vs {:?} {}",
            want["until"], want["max_gen_toks"], req.until, req.max_gen_toks
        ));
    }
    if want["target"].as_str() != Some(doc.target.as_str()) {
        wrong.push(format!(
            "{what}: target {} vs {:?}",
            want["target"], doc.target
        ));
    }
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
    let spec = bbh::spec().unwrap();
    for (i, line) in text.lines().enumerate() {
        let r: Value = serde_json::from_str(line).unwrap();
        let task = r["task"].as_str().unwrap();
        if task == "bbh" {
            let doc: bbh::Sample = serde_json::from_value(r["doc"].clone()).unwrap();
            let sub = r["subtask"].as_str().unwrap();
            compare_bbh(
                &format!("bbh {sub} line {}", i + 1),
                &spec,
                sub,
                &doc,
                &r,
                &mut wrong,
            );
            *per_task.entry(task.to_string()).or_default() += 1;
            continue;
        }
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
    assert_eq!(per_task.len(), 5, "{per_task:?}");
    assert_eq!(per_task["bbh"], 27);
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Every item against lm-eval's own requests (tier lm-eval-requests: data/ must hold the sets
/// and the requests `scripts/make-mc-corpus.sh` records with lm-eval).
#[test]
#[ignore = "tier lm-eval-requests: needs data/mc_reference (scripts/make-mc-corpus.sh, with lm-eval)"]
fn every_item_equals_lm_evals_requests() {
    let data = std::env::var_os("POCKET_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data")));
    let reference = data.join("mc_reference");
    assert!(
        reference.join("gpqa.jsonl").is_file(),
        "tier lm-eval-requests: {} is missing (scripts/make-mc-corpus.sh)",
        reference.join("gpqa.jsonl").display()
    );
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
        eprintln!(
            "{}: {} items compared with lm-eval's",
            bench.name(),
            items.len()
        );
    }
    let spec = bbh::spec().unwrap();
    let items = bbh::load(&spec, &data.join("bbh"), &[], None).unwrap();
    let text = std::fs::read_to_string(reference.join("bbh.jsonl")).unwrap();
    let want: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(items.len(), want.len(), "bbh");
    for (it, w) in items.iter().zip(&want) {
        assert_eq!(w["subtask"].as_str(), Some(it.task.as_str()));
        compare_bbh(
            &format!("bbh {}/{}", it.task, it.index),
            &spec,
            &it.task,
            &it.sample,
            w,
            &mut wrong,
        );
    }
    eprintln!("bbh: {} items compared with lm-eval's", items.len());
    wrong.truncate(20);
    assert!(wrong.is_empty(), "differ:\n{}", wrong.join("\n"));
}
