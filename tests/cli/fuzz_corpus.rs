//! Replays every committed fuzz input (fuzz/seeds: real files; fuzz/regressions: inputs that
//! once crashed, hung or ran out of memory) through the `pocket` binary, materialised exactly as
//! the fuzz targets do: the binary must exit 0 or 1, never panic, and fail in one line.

use crate::common;
#[path = "../../fuzz/src/inputs.rs"]
#[allow(dead_code)]
mod inputs;

use std::path::{Path, PathBuf};
use std::process::Stdio;

fn inputs_of(target: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for kind in ["seeds", "regressions"] {
        let dir = common::root().join("fuzz").join(kind).join(target);
        if let Ok(entries) = std::fs::read_dir(dir) {
            v.extend(entries.flatten().map(|e| e.path()));
        }
    }
    v.sort();
    v
}

/// Runs `pocket ARGS`; returns a complaint if it panicked or failed badly.
fn check(args: &[&str], what: &Path) -> Option<String> {
    let out = crate::common::pocket_command()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    let clean = match code {
        Some(0) => !err.contains("panicked"),
        Some(1) => {
            !err.contains("panicked")
                && err.starts_with("error: ")
                && err.trim_end().lines().count() == 1
        }
        _ => false,
    };
    (!clean).then(|| format!("{} ({args:?}): exit {code:?}: {err}", what.display()))
}

#[test]
fn committed_fuzz_inputs_never_crash_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    let mut n = 0;
    for (i, input) in inputs_of("hf_checkpoint").iter().enumerate() {
        let dir = tmp.path().join(format!("hf{i}"));
        let ckpt = inputs::write_checkpoint(&std::fs::read(input).unwrap(), &dir).unwrap();
        let c = ckpt.to_str().unwrap();
        bad.extend(check(&["inspect", c], input));
        bad.extend(check(&["run", c, "-p", "hi", "-n", "2"], input));
        n += 1;
    }
    for target in ["gguf_file", "gguf_tokenizer"] {
        for (i, input) in inputs_of(target).iter().enumerate() {
            let f = inputs::write_file(
                &std::fs::read(input).unwrap(),
                tmp.path(),
                &format!("{target}{i}.gguf"),
            )
            .unwrap();
            bad.extend(check(
                &["run", f.to_str().unwrap(), "-p", "hi", "-n", "2"],
                input,
            ));
            n += 1;
        }
    }
    for (i, input) in inputs_of("pocket_file").iter().enumerate() {
        let bytes = inputs::fix_pocket_checksum(&std::fs::read(input).unwrap());
        let f = inputs::write_file(&bytes, tmp.path(), &format!("p{i}.pocket")).unwrap();
        bad.extend(check(&["inspect", "--verify", f.to_str().unwrap()], input));
        bad.extend(check(
            &["run", f.to_str().unwrap(), "-p", "hi", "-n", "2"],
            input,
        ));
        n += 1;
    }
    for (i, input) in inputs_of("chat_template").iter().enumerate() {
        let dir = tmp.path().join(format!("t{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(common::tiny("qwen3-tiny"))
            .unwrap()
            .flatten()
        {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        std::fs::write(
            dir.join("chat_template.jinja"),
            std::fs::read(input).unwrap(),
        )
        .unwrap();
        bad.extend(check(
            &["run", dir.to_str().unwrap(), "-p", "hi", "-n", "2"],
            input,
        ));
        n += 1;
    }
    for (i, input) in inputs_of("structured").iter().enumerate() {
        let data = std::fs::read(input).unwrap();
        let (flag, text) = inputs::split_structured(&data);
        let value = match flag {
            "--regex" | "--choices" => String::from_utf8_lossy(text).to_string(),
            _ => inputs::write_file(text, tmp.path(), &format!("s{i}.txt"))
                .unwrap()
                .display()
                .to_string(),
        };
        let model = common::tiny("qwen2-tiny");
        let m = model.to_str().unwrap();
        bad.extend(check(
            &["run", m, "-p", "hi", "-n", "24", flag, &value],
            input,
        ));
        n += 1;
    }
    for (i, input) in inputs_of("decision").iter().enumerate() {
        let data = std::fs::read(input).unwrap();
        let (request, bytes) = inputs::split_decision(&data);
        let f = inputs::write_file(bytes, tmp.path(), &format!("d{i}.bin")).unwrap();
        let model = common::tiny("qwen2-tiny");
        let (m, f) = (model.to_str().unwrap(), f.to_str().unwrap());
        bad.extend(check(
            &if request {
                vec!["decide", m, "--request", f]
            } else {
                vec![
                    "decide", m, "--head", f, "--state", "x", "--choice", "q", "a", "b",
                ]
            },
            input,
        ));
        n += 1;
    }
    for (i, input) in inputs_of("lora_adapter").iter().enumerate() {
        let data = std::fs::read(input).unwrap();
        let (peft, bytes) = inputs::split_decision(&data);
        let path = inputs::write_adapter(peft, bytes, &tmp.path().join(format!("l{i}"))).unwrap();
        let model = common::tiny("qwen2-tiny");
        bad.extend(check(
            &[
                "run",
                model.to_str().unwrap(),
                "--lora",
                path.to_str().unwrap(),
                "-p",
                "hi",
                "-n",
                "2",
            ],
            input,
        ));
        n += 1;
    }
    for (i, input) in inputs_of("eval_logs").iter().enumerate() {
        let data = std::fs::read(input).unwrap();
        let mut args = vec!["eval".to_string(), "merge".into()];
        for (j, log) in inputs::split_logs(&data).into_iter().enumerate() {
            let f = inputs::write_file(log, tmp.path(), &format!("e{i}-{j}.jsonl")).unwrap();
            args.push(f.to_str().unwrap().into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bad.extend(check(&args, input));
        n += 1;
    }
    assert!(n >= 20, "only {n} committed inputs");
    assert!(
        bad.is_empty(),
        "{} of {n} inputs failed badly:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
