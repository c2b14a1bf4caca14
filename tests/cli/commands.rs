//! The `pocket` binary as users and scripts see it: help, exit codes, JSON output, and clean
//! one-line errors on broken input.

use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::common;
use common::{pocket, tiny as fixture};

/// A writable copy of a fixture checkpoint, to break.
fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join(name);
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    (tmp, dst)
}

/// Bad input: exit code 1, one line on stderr naming `names`, and no panic.
fn assert_clean_error(dir: &Path, names: &[&str]) -> String {
    for cmd in ["inspect", "run"] {
        let out =
            pocket(&[cmd, dir.to_str().unwrap(), "-p", "hi"][..if cmd == "run" { 4 } else { 2 }]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "one line expected: {err}"
        );
        assert!(err.starts_with("error: "), "{err}");
        for n in names {
            assert!(err.contains(n), "{cmd}: {err:?} should mention {n:?}");
        }
        assert!(out.stdout.is_empty());
    }
    String::from_utf8_lossy(&pocket(&["inspect", dir.to_str().unwrap()]).stderr).to_string()
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// `-h` is a first screen (the common options and the examples); `--help` has everything,
/// the expert options included.
#[test]
fn short_help_is_a_first_screen_and_long_help_has_every_option() {
    for (sub, common, expert) in [
        ("run", "--prompt", "--repeat-penalty"),
        ("export", "--output", "--sensitivity"),
        ("quantize", "--output", "--allow-nonfinite"),
        ("serve", "--parallel", "--read-timeout"),
        ("eval", "--tasks", "--ifeval-data"),
        ("bench", "--depth", "--no-verify"),
    ] {
        let short = String::from_utf8_lossy(&pocket(&[sub, "-h"]).stdout).to_string();
        let long = String::from_utf8_lossy(&pocket(&[sub, "--help"]).stdout).to_string();
        assert!(
            short.lines().count() <= 80,
            "{sub} -h: {} lines",
            short.lines().count()
        );
        assert!(
            short.contains(common) && short.contains("Examples"),
            "{sub} -h: {short}"
        );
        assert!(
            !short.contains("--activations"),
            "{sub} -h shows an expert option"
        );
        assert!(!short.contains(expert), "{sub} -h shows {expert}");
        for s in [common, expert, "--activations", "Examples"] {
            assert!(long.contains(s), "{sub} --help lacks {s}");
        }
    }
}

#[test]
fn help_lists_every_subcommand() {
    let out = pocket(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in ["export", "quantize", "run", "eval", "bench", "inspect"] {
        assert!(help.contains(sub), "{sub} missing from --help");
        assert!(pocket(&[sub, "--help"]).status.success(), "{sub} --help");
    }
    assert_eq!(
        pocket(&["run"]).status.code(),
        Some(2),
        "missing argument is a usage error"
    );
    assert_eq!(pocket(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn inspect_json_counts_parameters() {
    let out = pocket(&["inspect", fixture("qwen3-tiny").to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    // qwen3-tiny: vocab 384, hidden 64, 3 layers, 4 heads × head_dim 32, 2 KV heads, FFN 128,
    // q/k norms, tied head.
    let (v, h, l, q, kv, f, d) = (384, 64, 3, 4 * 32, 2 * 32, 128, 32);
    let per_layer = 2 * h + h * q + 2 * h * kv + q * h + 2 * d + 3 * h * f;
    assert_eq!(r["parameters"], v * h + l * per_layer + h);
    assert_eq!(r["spec"]["family"], "qwen3");
    assert_eq!(r["spec"]["head_dim"], 32);
    assert_eq!(r["dtypes"]["f16"]["parameters"], r["parameters"]);
    assert_eq!(r["tensors"].as_array().unwrap().len(), 1 + l * 11 + 1);
}

#[test]
fn run_json_matches_transformers_greedy_tokens() {
    for name in ["llama-tiny", "qwen2-tiny", "qwen3-tiny"] {
        let r: Value = serde_json::from_str(
            &std::fs::read_to_string(fixture(name).join("reference.json")).unwrap(),
        )
        .unwrap();
        let case = &r["greedy"][0];
        let out = pocket(&[
            "run",
            fixture(name).to_str().unwrap(),
            "-p",
            case["prompt"].as_str().unwrap(),
            "--temp",
            "0",
            "--max-tokens",
            "20",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["prompt_ids"], case["prompt_ids"]);
        let want = case["generated_ids"].as_array().unwrap();
        let got = j["generated_ids"].as_array().unwrap();
        // The whole answer, not a prefix: one that stops early or runs on fails. A reference
        // shorter than the 20 allowed ended at the end-of-sequence token, which transformers
        // lists and pocket's ids leave out; pocket must stop there too.
        let (finish, answer) = if want.len() == 20 {
            ("length", &want[..])
        } else {
            ("stop", &want[..want.len() - 1])
        };
        assert_eq!(answer, &got[..], "{name}");
        assert_eq!(j["finish_reason"], finish, "{name}");
        assert!(j["timings"]["decode_ms"].as_f64().unwrap() > 0.0, "{name}");
    }
}

#[test]
fn seeded_sampling_reproduces_and_stdin_is_a_prompt() {
    let dir = fixture("qwen2-tiny");
    let run = |seed: &str| {
        let out = crate::common::pocket_command()
            .args([
                "run",
                dir.to_str().unwrap(),
                "--temp",
                "1.0",
                "--top-p",
                "0.95",
                "--seed",
                seed,
                "-n",
                "24",
                "--json",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b"Tell me a story")?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(out.status.success());
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        j["generated_ids"].clone()
    };
    let a = run("7");
    assert_eq!(a, run("7"));
    assert_ne!(a, run("8"));
}

#[test]
fn raw_mode_skips_the_template() {
    let out = pocket(&[
        "run",
        fixture("qwen3-tiny").to_str().unwrap(),
        "--raw",
        "-p",
        "Hello world",
        "-n",
        "3",
        "--json",
    ]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("qwen3-tiny").join("reference.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(j["prompt_ids"], r["tokenize"][0]["ids_special"]);
}

#[test]
fn truncated_safetensors_is_a_clean_error() {
    let (_t, dir) = copy_fixture("qwen3-tiny");
    let f = dir.join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    assert_clean_error(&dir, &["model.safetensors", "truncated"]);
    // Cut inside the header, and shorter than the length prefix itself.
    std::fs::write(&f, &bytes[..100]).unwrap();
    assert_clean_error(&dir, &["model.safetensors", "header length"]);
    std::fs::write(&f, &bytes[..5]).unwrap();
    assert_clean_error(&dir, &["model.safetensors", "too short"]);
}

#[test]
fn header_offsets_past_the_end_are_a_clean_error() {
    let (_t, dir) = copy_fixture("qwen3-tiny");
    let f = dir.join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    // Point the last tensor's end far past the end of the file (and of the data).
    let (name, end) = header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| (k.clone(), v["data_offsets"][1].as_u64().unwrap()))
        .max_by_key(|(_, e)| *e)
        .unwrap();
    header[&name]["data_offsets"][1] = (end + 1_000_000).into();
    header[&name]["shape"] = serde_json::json!([1]);
    let text = serde_json::to_vec(&header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(&text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(&f, out).unwrap();
    assert_clean_error(&dir, &["model.safetensors", &name]);

    // A header length larger than the file.
    let mut out = bytes.clone();
    out[..8].copy_from_slice(&(bytes.len() as u64 * 4).to_le_bytes());
    std::fs::write(&f, out).unwrap();
    assert_clean_error(&dir, &["model.safetensors", "runs past the end"]);
}

#[test]
fn config_errors_name_the_field() {
    let (_t, dir) = copy_fixture("qwen2-tiny");
    let cfg = dir.join("config.json");
    let orig = std::fs::read(&cfg).unwrap();
    edit_json(&cfg, |v| {
        v.as_object_mut().unwrap().remove("num_hidden_layers");
    });
    assert_clean_error(&dir, &["config.json", "missing field `num_hidden_layers`"]);
    std::fs::write(&cfg, &orig).unwrap();
    edit_json(&cfg, |v| v["model_type"] = "mamba".into());
    assert_clean_error(&dir, &["config.json", "unsupported model_type `mamba`"]);
    std::fs::write(&cfg, &orig).unwrap();
    edit_json(&cfg, |v| v["hidden_size"] = "wide".into());
    assert_clean_error(&dir, &["config.json", "hidden_size"]);
    std::fs::write(&cfg, b"{not json").unwrap();
    assert_clean_error(&dir, &["config.json", "invalid JSON"]);
}

#[test]
fn missing_or_misshapen_tensors_are_named() {
    let (_t, dir) = copy_fixture("llama-tiny");
    let index = dir.join("model.safetensors.index.json");
    let orig = std::fs::read(&index).unwrap();
    // A shard the index promises is gone.
    let shard = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("00003-of"))
        .unwrap();
    let saved = std::fs::read(&shard).unwrap();
    std::fs::remove_file(&shard).unwrap();
    assert_clean_error(&dir, &[shard.file_name().unwrap().to_str().unwrap()]);
    std::fs::write(&shard, saved).unwrap();
    // An index entry that escapes the directory.
    edit_json(&index, |v| {
        v["weight_map"]["lm_head.weight"] = "../../etc/passwd".into()
    });
    assert_clean_error(
        &dir,
        &["model.safetensors.index.json", "not a plain file name"],
    );
    std::fs::write(&index, &orig).unwrap();
    // The config promises a shape the tensors do not have.
    edit_json(&dir.join("config.json"), |v| {
        v["intermediate_size"] = 96.into()
    });
    assert_clean_error(&dir, &["mlp.gate_proj.weight", "expected [96, 64]"]);
}

#[test]
fn not_a_model_and_missing_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    assert_clean_error(tmp.path(), &["config.json"]);
    assert_clean_error(&tmp.path().join("nope"), &["nope", "no such file"]);
    let (_t, dir) = copy_fixture("qwen2-tiny");
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    assert_clean_error(&dir, &["tokenizer.json"]);
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    use std::io::BufRead;
    let mut child = crate::common::pocket_command()
        .args([
            "inspect",
            fixture("llama-tiny").to_str().unwrap(),
            "--tensors",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader (like `head -1`) is gone now.
    let out = child.wait_with_output().unwrap();
    assert!(first.starts_with("model"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn bench_reports_every_figure_as_json() {
    let fixture = fixture("qwen3-tiny");
    let out = pocket(&[
        "bench",
        fixture.to_str().unwrap(),
        "--pp",
        "16",
        "-n",
        "4",
        "--depth",
        "8",
        "--reps",
        "3",
        "-t",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["pp", "tg", "tg_depth"] {
        let f = &v[key];
        let (lo, mid, hi) = (
            f["tok_s_min"].as_f64().unwrap(),
            f["tok_s_median"].as_f64().unwrap(),
            f["tok_s_max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{key}: {f}");
    }
    assert_eq!(v["pp"]["tokens"], 16);
    assert_eq!(v["tg_depth"]["depth"], 8);
    assert_eq!(v["threads"], 1);
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert!(v["isa"].is_string() && v["load_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        (&v["activations"], &v["kv"]),
        (&"int8x2".into(), &"f16".into())
    );
    // The global --activations flag selects the exact path (f32 activations and KV cache).
    let out = pocket(&[
        "--activations",
        "f32",
        "bench",
        fixture.to_str().unwrap(),
        "--pp",
        "16",
        "-n",
        "2",
        "--depth",
        "0",
        "--reps",
        "1",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&v["activations"], &v["kv"]),
        (&"f32".into(), &"f32".into())
    );
    // Asking for more context than the model has is a clean error.
    let out = pocket(&["bench", fixture.to_str().unwrap(), "--depth", "100000000"]);
    assert_eq!(out.status.code(), Some(1));
}

/// The first-run errors name the path once and say what pocket reads (issue #19).
#[test]
fn first_run_errors_say_what_pocket_reads() {
    let tmp = tempfile::tempdir().unwrap();
    // Not a model: the message lists all three formats.
    let text = tmp.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    let err = assert_clean_error(&text, &["notes.txt", "GGUF", ".pocket", "HF checkpoint"]);
    assert_eq!(err.matches("notes.txt").count(), 1, "{err}");
    // An MNN package is named as one, with what to do instead.
    let q4 = tmp.path().join("q4.pocket");
    let o = pocket(&[
        "export",
        fixture("qwen3-tiny").to_str().unwrap(),
        "-o",
        q4.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mnn = tmp.path().join("mnn");
    let (q4s, mnns) = (q4.to_str().unwrap(), mnn.to_str().unwrap());
    crate::common::pocket_ok(&["export", q4s, "--format", "mnn", "-o", mnns]);
    assert_clean_error(&mnn, &["an MNN package", "llm_demo"]);
    // Export into a missing folder: the file once, the folder once.
    let out = tmp.path().join("no/such/dir/x.pocket");
    let o = pocket(&[
        "export",
        fixture("qwen3-tiny").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("x.pocket").count(), 1, "{err}");
    assert!(err.contains("no such folder"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // run --help names every input format.
    let help = String::from_utf8_lossy(&pocket(&["run", "--help"]).stdout).to_string();
    assert!(help.contains("GGUF") && help.contains(".pocket"), "{help}");
}

/// `--threads 0` is a usage error; more threads than CPUs is lowered, with a note.
#[test]
fn thread_counts_are_checked() {
    let model = fixture("qwen3-tiny");
    let m = model.to_str().unwrap();
    let o = pocket(&["run", m, "-p", "hi", "-n", "2", "--threads", "0"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let many = (std::thread::available_parallelism().unwrap().get() + 7).to_string();
    let o = pocket(&["run", m, "-p", "hi", "-n", "2", "--threads", &many]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("--threads {many}")) && err.contains("using"),
        "{err}"
    );
    // bench takes the prompt-token count as --pp: -p means a prompt text everywhere.
    let o = pocket(&["bench", m, "-p", "16"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `inspect` is a short summary; `--tensors` adds the table. RoPE reads as people write it.
#[test]
fn inspect_summarises_and_lists_tensors_on_request() {
    let m = fixture("gemma3-tiny");
    let short =
        String::from_utf8_lossy(&pocket(&["inspect", m.to_str().unwrap()]).stdout).to_string();
    assert!(short.lines().count() < 25, "{short}");
    assert!(
        short.contains("tensors      54 (--tensors lists them)"),
        "{short}"
    );
    assert!(!short.contains("model.layers.0."), "{short}");
    assert!(
        !short.contains("None") && !short.contains("Some("),
        "{short}"
    );
    assert!(
        short.contains("RoPE theta 1000000, linear ×2, RMSNorm eps 0.000001"),
        "{short}"
    );
    let long =
        String::from_utf8_lossy(&pocket(&["inspect", m.to_str().unwrap(), "--tensors"]).stdout)
            .to_string();
    assert!(
        long.contains("model.layers.0.self_attn.q_proj.weight"),
        "{long}"
    );
    // A GGUF's type by the name llama.cpp's users give it, and its own name: this one was
    // written by llama.cpp's llama-quantize (fixtures/make_gguf_fixtures.py).
    let g = common::root().join("fixtures/gguf/llama-tiny-iq4_nl.gguf");
    let out =
        String::from_utf8_lossy(&pocket(&["inspect", g.to_str().unwrap()]).stdout).to_string();
    assert!(
        out.contains("(source dtype IQ4_NL, GGUF file_type 25)"),
        "{out}"
    );
    assert!(out.contains("\nname         llama-tiny\n"), "{out}");
}

/// `POCKET_ISA` takes the levels of this build's architecture only: an unknown name and a
/// level of the other architecture are refused before anything runs, naming what is accepted;
/// a valid cap is reported by `bench --json`.
#[test]
fn isa_caps_are_checked_and_reported() {
    let model = fixture("qwen3-tiny");
    let model = model.to_str().unwrap();
    let (native, foreign) = if cfg!(target_arch = "aarch64") {
        ("neon", "avx2")
    } else {
        ("avx2", "neon")
    };
    let bench = |isa: &str| {
        common::pocket_command()
            .env("POCKET_ISA", isa)
            .args(["bench", model, "--pp", "4", "-n", "2", "--depth", "0"])
            .args(["--reps", "1", "--json"])
            .output()
            .unwrap()
    };
    for (isa, needle) in [
        ("sse9", "expected one of scalar"),
        (foreign, "not an instruction set"),
    ] {
        let out = bench(isa);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "POCKET_ISA={isa}: {err}");
        assert!(err.contains(needle) && err.contains(isa), "{err}");
        assert!(out.stdout.is_empty());
    }
    let out = bench("scalar");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["isa"], "scalar");
    let out = bench(native);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Capped at the lowest SIMD level, or scalar on a CPU without it.
    let isa = r["isa"].as_str().unwrap();
    assert!(isa.ends_with(native) || isa == "scalar", "{isa}");
}
