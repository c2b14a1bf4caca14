//! `pocket run` one-shot options as scripts use them: seeds reproduce, penalties and stop
//! strings change the answer the documented way, and piped output is plain text.

use serde_json::Value;
use std::io::Write;
use std::process::{Output, Stdio};

fn fixture(name: &str) -> String {
    crate::common::root()
        .join("fixtures/tiny")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn pocket(args: &[&str]) -> Output {
    crate::common::pocket_command()
        .args(args)
        .output()
        .expect("run pocket")
}

fn run_json(extra: &[&str]) -> Value {
    let model = fixture("qwen2-tiny");
    let mut args = vec!["run", &model, "-p", "Write a poem.", "--json"];
    args.extend_from_slice(extra);
    let out = pocket(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn same_seed_and_settings_give_the_same_output() {
    let sampled = ["--temp", "0.9", "--top-p", "0.95", "-n", "30"];
    let a = run_json(&[&sampled[..], &["--seed", "42"]].concat());
    let b = run_json(&[&sampled[..], &["--seed", "42"]].concat());
    assert_eq!(a["generated_ids"], b["generated_ids"]);
    assert_eq!(a["text"], b["text"]);
    let c = run_json(&[&sampled[..], &["--seed", "43"]].concat());
    assert_ne!(a["generated_ids"], c["generated_ids"]);
}

#[test]
fn repeat_penalty_reduces_repetition() {
    let ids = |v: &Value| -> Vec<u64> {
        v["generated_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let repeats = |ids: &[u64]| ids.windows(2).filter(|w| w[0] == w[1]).count();
    let distinct = |ids: &[u64]| {
        let mut v = ids.to_vec();
        v.sort();
        v.dedup();
        v.len()
    };
    let plain = ids(&run_json(&["--temp", "0", "-n", "60"]));
    let penalized = ids(&run_json(&[
        "--temp",
        "0",
        "-n",
        "60",
        "--repeat-penalty",
        "1.5",
        "--frequency-penalty",
        "0.5",
    ]));
    assert_ne!(plain, penalized);
    assert!(
        repeats(&penalized) < repeats(&plain) && distinct(&penalized) > distinct(&plain),
        "plain {plain:?}\npenalized {penalized:?}"
    );
}

#[test]
fn stop_string_ends_the_answer_before_it() {
    let full = run_json(&["--temp", "0", "-n", "40"]);
    let text = full["text"].as_str().unwrap();
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() > 10, "{text:?}");
    let stop: String = chars[6..9].iter().collect();
    let cut = run_json(&["--temp", "0", "-n", "40", "--stop", &stop]);
    assert_eq!(cut["text"], text[..text.find(&stop).unwrap()]);
    assert_eq!(cut["finish_reason"], "stop");

    // Streaming to a pipe: the same text, no stop string, no colours.
    let model = fixture("qwen2-tiny");
    let out = pocket(&[
        "run",
        &model,
        "-p",
        "Write a poem.",
        "--temp",
        "0",
        "-n",
        "40",
        "--stop",
        &stop,
    ]);
    assert!(out.status.success());
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(shown.trim_end_matches('\n'), cut["text"].as_str().unwrap());
    assert!(!shown.contains('\x1b'));
    assert!(
        out.stderr.is_empty(),
        "no stats when stderr is not a terminal"
    );
}

#[test]
fn json_fields_are_unchanged() {
    let j = run_json(&["-n", "5"]);
    let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "finish_reason",
            "generated_ids",
            "generated_tokens",
            "kv_cache",
            "model",
            "prompt_ids",
            "prompt_tokens",
            "text",
            "timings"
        ]
    );
    let mut timings: Vec<&str> = j["timings"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    timings.sort();
    assert_eq!(
        timings,
        [
            "decode_ms",
            "decode_tok_per_s",
            "prefill_ms",
            "prefill_tok_per_s"
        ]
    );
    // The cache's bytes: what it holds now and what the whole context would take.
    let kv = &j["kv_cache"];
    let positions = kv["positions"].as_u64().unwrap();
    assert!(positions >= j["prompt_tokens"].as_u64().unwrap());
    assert!(kv["bytes"].as_u64().unwrap() > 0);
    assert!(kv["bytes_at_context"].as_u64().unwrap() >= kv["bytes"].as_u64().unwrap());
    assert_eq!(kv["type"], "f16");
}

#[test]
fn stdin_is_the_prompt_and_bad_options_are_usage_errors() {
    let model = fixture("qwen3-tiny");
    let mut child = crate::common::pocket_command()
        .args(["run", &model, "--json", "-n", "3", "--temp", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello from stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_flag = {
        let o = pocket(&[
            "run",
            &model,
            "-p",
            "Hello from stdin",
            "--json",
            "-n",
            "3",
            "--temp",
            "0",
        ]);
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    assert_eq!(j["prompt_ids"], by_flag["prompt_ids"]);

    for bad in [
        &["--stop", ""][..],
        &["--max-tokens", "0"],
        &["--history", "h", "--no-history"],
    ] {
        let mut args = vec!["run", &model, "-p", "hi"];
        args.extend_from_slice(bad);
        assert_eq!(pocket(&args).status.code(), Some(2), "{bad:?}");
    }
    let out = pocket(&["run", &model, "-p", "hi", "--temp=-1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--temp"));
}

/// `--no-verify` runs a `.pocket` whose tensor bytes no longer match their checksums (the
/// default refuses it: tests/cli/bad_input.rs), and the output it gives is not the intact
/// file's: the check guards against real damage.
#[test]
fn no_verify_runs_a_damaged_pocket() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.pocket");
    let out = pocket(&[
        "export",
        &fixture("qwen2-tiny"),
        "-o",
        good.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = std::fs::read(&good).unwrap();
    let f = pocket_formats::pocket::reader::PocketFile::open(&good).unwrap();
    // Every byte of the embedding's data section, flipped: a damage any answer shows.
    let t = f
        .header
        .tensors
        .iter()
        .find(|t| t.name.contains("embed_tokens"))
        .unwrap();
    let data_at = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let mut bad = b.clone();
    for x in &mut bad[data_at + t.offset as usize..][..t.size as usize] {
        *x ^= 0x5A;
    }
    let damaged = dir.path().join("damaged.pocket");
    std::fs::write(&damaged, &bad).unwrap();
    let args = |m: &std::path::Path| {
        vec![
            "run".to_string(),
            m.display().to_string(),
            "-p".into(),
            "Write a poem.".into(),
            "-n".into(),
            "8".into(),
            "--json".into(),
        ]
    };
    let refused = pocket(
        &args(&damaged)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(!refused.status.success() && refused.stdout.is_empty());
    let mut a = args(&damaged);
    a.push("--no-verify".into());
    let ran = pocket(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let intact = pocket(&args(&good).iter().map(String::as_str).collect::<Vec<_>>());
    let ids =
        |o: &Output| serde_json::from_slice::<Value>(&o.stdout).unwrap()["generated_ids"].clone();
    assert_ne!(
        ids(&ran),
        ids(&intact),
        "damage changed nothing: the test shows nothing"
    );
}

/// A context whose KV cache would not fit in the memory the process may use is refused before
/// the cache is made, with the figures; a bad budget is named.
#[test]
fn a_context_that_does_not_fit_is_refused_with_the_figures() {
    let model = crate::common::tiny("qwen3-tiny").display().to_string();
    let run = |limit: &str, extra: &[&str]| {
        let mut cmd = crate::common::pocket_command();
        cmd.env("POCKET_MEM_LIMIT", limit)
            .args(["run", &model, "-p", "hi", "-n", "2"])
            .args(extra);
        cmd.output().unwrap()
    };
    let out = run("1M", &["--ctx", "256", "--kv", "q8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for needle in [
        "--ctx 256 needs",
        "KV cache (q8)",
        "POCKET_MEM_LIMIT",
        "positions fit",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(out.stdout.is_empty(), "no partial output");
    let out = run("lots", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("POCKET_MEM_LIMIT=lots"), "{err}");
    // A budget that holds it runs.
    assert!(run("64G", &["--kv", "q8"]).status.success());
}
