//! Helpers shared by the integration tests: fixture paths, token-id lists from reference JSON,
//! and the logit comparison every "equals the reference" test makes.
#![allow(dead_code)] // each test binary uses a subset

use pocket::config::{Activations, EngineConfig, Isa, KvPrecision};
use pocket::loader::{LoadOptions, LoadedModel};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The checkout's root (these tests are built by cmd/'s package).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cmd/ is inside the checkout")
        .to_path_buf()
}

/// The engine configuration these tests run with: the fast path, capped by `POCKET_ISA` and
/// switched to f32 activations by `POCKET_ACT=f32` or one-digit int8 by `POCKET_ACT=int8` (CI reruns the suites per ISA this way; the
/// library itself reads no environment).
pub fn config() -> EngineConfig {
    let mut c = EngineConfig::fast();
    if let Some(isa) = std::env::var("POCKET_ISA")
        .ok()
        .and_then(|v| Isa::parse(&v))
    {
        c = c.capped(isa);
    }
    match std::env::var("POCKET_ACT").as_deref() {
        Ok("f32") => {
            c.activations = Activations::F32;
            c.kv = KvPrecision::F32;
        }
        Ok("int8") => c.activations = Activations::Int8,
        _ => {}
    }
    c
}

/// Opens a model with [`config`], checksums verified.
pub fn open(path: &Path) -> Result<LoadedModel, pocket::Error> {
    open_with(path, config())
}

/// Opens a model on the exact path (f32 activations and cache) at [`config`]'s ISA.
pub fn open_exact(path: &Path) -> Result<LoadedModel, pocket::Error> {
    open_with(
        path,
        EngineConfig {
            cpu: config().cpu,
            ..EngineConfig::exact()
        },
    )
}

pub fn open_with(path: &Path, config: EngineConfig) -> Result<LoadedModel, pocket::Error> {
    LoadedModel::open_with(
        path,
        LoadOptions {
            verify: true,
            config,
        },
    )
}

/// A matrix of `file` by its HF name, as the engine builds it (on [`config`]'s kernels).
pub fn matrix(
    file: &pocket::loader::ModelFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> pocket::weights::Matrix {
    pocket::weights::Matrix::from_stored(file.stored(name).unwrap(), rows, cols, config())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

pub fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference file"))
        .expect("valid JSON")
}

/// Every `{kind: {text, ids, ids_special}}` case of a reference's `tokenize` object encodes to
/// the recorded ids, without and with special tokens.
pub fn assert_tokenizes(m: &LoadedModel, cases: &Value) {
    for (kind, case) in cases.as_object().expect("tokenize cases") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(
            m.tokenizer.encode(text, false).unwrap(),
            ids(&case["ids"]),
            "{kind}: {text:?}"
        );
        assert_eq!(
            m.tokenizer.encode(text, true).unwrap(),
            ids(&case["ids_special"]),
            "{kind} with specials"
        );
    }
}

/// Runs `logits.ids` one token at a time and returns the largest |logit − reference| over the
/// recorded positions (`logits.values`: one row of vocabulary logits per position). `m` must
/// be on the exact path ([`open_exact`]): these checks pin the math and the codecs, not the
/// int8 fast path.
pub fn max_logit_error(m: &LoadedModel, logits: &Value) -> f32 {
    assert_eq!(
        m.model.config.activations,
        Activations::F32,
        "open the model with common::open_exact"
    );
    let tokens = ids(&logits["ids"]);
    let mut state = m.model.new_state(tokens.len().max(1));
    let mut worst = 0.0f32;
    for (pos, &t) in tokens.iter().enumerate() {
        let got = m.model.step(&mut state, t, true).unwrap().unwrap();
        let want = logits["values"][pos].as_array().expect("a row of logits");
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            worst = worst.max((a - b.as_f64().unwrap() as f32).abs());
        }
    }
    worst
}

/// One recorded greedy case (`prompt`, `prompt_ids`, `generated_ids`, as written by the
/// reference scripts): checks the templated prompt ids, then returns our greedy tokens (with
/// the end-of-sequence token appended when we stopped on it, as transformers' output includes
/// it), the reference's, and our decoded text.
pub fn greedy_case(
    m: &LoadedModel,
    case: &Value,
    max_tokens: usize,
) -> (Vec<u32>, Vec<u32>, String) {
    use pocket::chat_template::Message;
    use pocket::generate::{generate, Control, FinishReason};
    use pocket::sampler::{Sampler, SamplerConfig};
    let prompt = case["prompt"].as_str().expect("prompt");
    let prompt_ids = m
        .encode_chat(&[Message::new("user", prompt)], true)
        .unwrap();
    assert_eq!(
        prompt_ids,
        ids(&case["prompt_ids"]),
        "prompt ids for {prompt:?}"
    );
    let want = ids(&case["generated_ids"]);
    // The exact path's f32 cache: a greedy run follows transformers token for token only while
    // no near-tie is rounded the other way (the f16 cache, SmolLM2's "good morning" prompt,
    // flips one at token 6; its perplexity is unchanged, docs/performance.md).
    let mut state = m.model.new_state_kv(
        prompt_ids.len() + max_tokens + 1,
        pocket::kv_cache::KvPrecision::F32,
    );
    let mut sampler = Sampler::new(SamplerConfig::default());
    let g = generate(
        &m.model,
        &mut state,
        &prompt_ids,
        &mut sampler,
        &m.stop_ids,
        max_tokens,
        |_| Control::Continue,
    )
    .unwrap();
    let mut got = g.tokens.clone();
    if g.finish_reason == FinishReason::Stop {
        let eos = *want.last().expect("a reference token");
        assert!(m.stop_ids.contains(&eos), "the reference ends on a stop id");
        got.push(eos);
    }
    (got, want, m.tokenizer.decode(&g.tokens, true))
}

/// The words that start the `pocket` binary: the binary itself, or, when Cargo runs the tests
/// through a runner (`CARGO_TARGET_<TRIPLE>_RUNNER`, e.g. `qemu-aarch64 -L /` for a cross-built
/// suite, where the host may have no binfmt_misc to run a foreign ELF), the runner's words
/// first, so the spawned binary runs where the test binary runs.
pub fn pocket_argv() -> Vec<String> {
    let bin = env!("CARGO_BIN_EXE_pocket").to_string();
    let var = format!(
        "CARGO_TARGET_{}_UNKNOWN_{}_GNU_RUNNER",
        std::env::consts::ARCH.to_uppercase(),
        std::env::consts::OS.to_uppercase()
    );
    let mut argv: Vec<String> = std::env::var(var)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    argv.push(bin);
    argv
}

/// A `Command` for the `pocket` binary ([`pocket_argv`]).
pub fn pocket_command() -> std::process::Command {
    let argv = pocket_argv();
    let mut c = std::process::Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}

/// Runs the `pocket` binary in `dir` and insists that it succeeds, naming the arguments and
/// its stderr when it does not.
pub fn pocket_ok_in(dir: &Path, args: &[&str]) -> std::process::Output {
    let o = pocket_command()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run pocket");
    assert!(
        o.status.success(),
        "pocket {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// [`pocket_ok_in`] from the checkout's root.
pub fn pocket_ok(args: &[&str]) -> std::process::Output {
    pocket_ok_in(&root(), args)
}

/// Runs the `pocket` binary.
pub fn pocket(args: &[&str]) -> std::process::Output {
    pocket_command().args(args).output().expect("run pocket")
}

/// A tiny random checkpoint in fixtures/tiny.
pub fn tiny(name: &str) -> PathBuf {
    root().join("fixtures/tiny").join(name)
}

/// `pocket quantize SRC -o OUT --json EXTRA…`, which must succeed; its JSON report.
pub fn quantize(src: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "quantize",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = pocket(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("a JSON report")
}

/// Whether a missing fetched file must fail its test instead of skipping it: CI sets
/// `POCKET_REQUIRE_DATA=1` after fetching what its tiers need, so a check it meant to run can
/// never pass by finding nothing to check.
pub fn data_required() -> bool {
    std::env::var_os("POCKET_REQUIRE_DATA").is_some_and(|v| v == "1")
}

/// A model file of the `demo-model` tier (the README's demo GGUF, which `scripts/demo.sh` and
/// `scripts/fetch-models.sh smollm2` put under `models/`, never in the repository): its path
/// when it is there. Without it the test fails under `POCKET_REQUIRE_DATA=1`; otherwise it
/// says on stderr which file is missing and what fetches it, and the caller skips.
pub fn fetched_model(relative: &str, fetched_by: &str) -> Option<PathBuf> {
    let path = root().join(relative);
    if path.is_file() {
        Some(path)
    } else if data_required() {
        panic!(
            "tier demo-model: {} is missing ({fetched_by}); POCKET_REQUIRE_DATA=1 makes a \
             missing file a failure",
            path.display()
        )
    } else {
        eprintln!(
            "skipped (tier demo-model): needs {} ({fetched_by})",
            path.display()
        );
        None
    }
}

/// A model file of an opt-in tier (`#[ignore = "tier …"]` tests, run with `--ignored`): the
/// test was asked for by name, so a missing file always fails it, naming the file and its
/// fetch command.
pub fn tier_model(tier: &str, relative: &str, fetched_by: &str) -> PathBuf {
    let path = root().join(relative);
    assert!(
        path.is_file(),
        "tier {tier}: {} is missing ({fetched_by})",
        path.display()
    );
    path
}

/// Mean KL of `build`'s next-token distributions from `source`'s over the README (text no
/// calibration sees), both on the exact f32 path.
pub fn kl_on_readme(build: &Path, source: &Path) -> f64 {
    let o = pocket_ok(&[
        "eval",
        "ppl",
        build.to_str().unwrap(),
        "--baseline",
        source.to_str().unwrap(),
        "--text",
        root().join("README.md").to_str().unwrap(),
        "--max-tokens",
        "1024",
        "--activations",
        "f32",
        "--kv",
        "f32",
        "--baseline-activations",
        "f32",
        "--baseline-kv",
        "f32",
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["kld_mean"].as_f64().unwrap()
}
