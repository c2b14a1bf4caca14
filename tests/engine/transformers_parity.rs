//! The reference engine against Hugging Face transformers, on the tiny random checkpoints in
//! fixtures/tiny (made by fixtures/make_fixtures.py, which records transformers' outputs).

use pocket::chat_template::Message;
use pocket::kv_cache::KvPrecision;
use pocket::loader::LoadedModel;
use serde_json::Value;

use crate::common;
use common::ids;

const FIXTURES: [&str; 4] = ["llama-tiny", "qwen2-tiny", "qwen3-tiny", "gemma3-tiny"];

fn fixture(name: &str) -> (LoadedModel, Value) {
    let dir = crate::common::root().join("fixtures/tiny").join(name);
    let reference = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    (
        crate::common::open(&dir).expect("fixture loads"),
        serde_json::from_str(&reference).unwrap(),
    )
}

#[test]
fn logits_match_transformers_at_every_position() {
    for name in FIXTURES {
        let (m, r) = fixture(name);
        let tokens = ids(&r["logits"]["ids"]);
        let expected = r["logits"]["values"].as_array().unwrap();
        let mut state = m.model.new_state_kv(256, KvPrecision::F32);
        let mut worst = 0.0f32;
        for (pos, &t) in tokens.iter().enumerate() {
            let logits = m.model.step(&mut state, t, true).unwrap().unwrap();
            let want = expected[pos].as_array().unwrap();
            assert_eq!(logits.len(), want.len());
            for (a, b) in logits.iter().zip(want) {
                worst = worst.max((a - b.as_f64().unwrap() as f32).abs());
            }
        }
        eprintln!(
            "{name}: max |logit - transformers| = {worst:.2e} over {} positions",
            tokens.len()
        );
        assert!(worst <= 1e-4, "{name}: max abs logit error {worst} > 1e-4");
    }
}

/// The default f16 KV cache stays close to transformers (f16 rounds keys and values to 11
/// significant bits) and well inside what the f32 cache is asserted to above.
#[test]
fn f16_kv_cache_stays_close_to_transformers() {
    for name in FIXTURES {
        let (m, r) = fixture(name);
        let tokens = ids(&r["logits"]["ids"]);
        let expected = r["logits"]["values"].as_array().unwrap();
        let mut state = m.model.new_state_kv(256, KvPrecision::F16);
        let (mut worst, mut scale) = (0.0f32, 0.0f32);
        for (pos, &t) in tokens.iter().enumerate() {
            let logits = m.model.step(&mut state, t, true).unwrap().unwrap();
            for (a, b) in logits.iter().zip(expected[pos].as_array().unwrap()) {
                let b = b.as_f64().unwrap() as f32;
                worst = worst.max((a - b).abs());
                scale = scale.max(b.abs());
            }
        }
        eprintln!(
            "{name}: f16 KV max |logit - transformers| = {worst:.2e} (logits up to {scale:.2})"
        );
        assert!(worst > 0.0, "{name}: the f16 cache should round something");
        assert!(
            worst <= 1e-2 * scale.max(1.0),
            "{name}: f16 KV error {worst}"
        );
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    for name in FIXTURES {
        let (m, r) = fixture(name);
        for case in r["greedy"].as_array().unwrap() {
            let (got, want, _) = common::greedy_case(&m, case, 20);
            let prompt = &case["prompt"];
            assert_eq!(got, want, "{name}: greedy tokens for {prompt:?}");
        }
    }
}

#[test]
fn tokenizer_and_chat_template_match_transformers() {
    for name in FIXTURES {
        let (m, r) = fixture(name);
        for case in r["tokenize"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            assert_eq!(
                m.tokenizer.encode(text, false).unwrap(),
                ids(&case["ids"]),
                "{name}: {text:?}"
            );
            assert_eq!(
                m.tokenizer.encode(text, true).unwrap(),
                ids(&case["ids_special"]),
                "{name}: {text:?}"
            );
            assert_eq!(
                m.tokenizer.decode(&ids(&case["ids"]), false),
                case["decoded"].as_str().unwrap()
            );
        }
        let chat = &r["chat"];
        let messages: Vec<Message> = serde_json::from_value(chat["messages"].clone()).unwrap();
        let rendered = m.render_chat(&messages, true).unwrap();
        assert_eq!(
            rendered,
            chat["rendered"].as_str().unwrap(),
            "{name}: rendered chat"
        );
        assert_eq!(
            m.encode_chat(&messages, true).unwrap(),
            ids(&chat["ids"]),
            "{name}: chat ids"
        );
    }
}

#[test]
fn kv_cache_reuse_equals_a_fresh_run() {
    // Truncating the cache and re-running the tail must give the logits of a fresh run.
    let (m, r) = fixture("qwen3-tiny");
    let tokens = ids(&r["logits"]["ids"]);
    let mut fresh = m.model.new_state_kv(64, KvPrecision::F32);
    let mut want = Vec::new();
    for &t in &tokens {
        want = m.model.step(&mut fresh, t, true).unwrap().unwrap().to_vec();
    }
    let mut reused = m.model.new_state_kv(64, KvPrecision::F32);
    for &t in &tokens {
        m.model.step(&mut reused, t, false).unwrap();
    }
    reused.cache.truncate(10);
    let mut got = Vec::new();
    for &t in &tokens[10..] {
        got = m
            .model
            .step(&mut reused, t, true)
            .unwrap()
            .unwrap()
            .to_vec();
    }
    assert_eq!(got, want);
}

#[test]
fn batched_forward_matches_transformers() {
    // The prefill/perplexity path (one batch, decoded weights reused across tokens).
    for name in FIXTURES {
        let (m, r) = fixture(name);
        let tokens = ids(&r["logits"]["ids"]);
        let expected = r["logits"]["values"].as_array().unwrap();
        let mut state = m.model.new_state_kv(256, KvPrecision::F32);
        // Two chunks, so the second attends over a cache the first filled.
        let mut got = m
            .model
            .forward_batch(&mut state, &tokens[..17], pocket::model::Logits::All)
            .unwrap();
        got.extend(
            m.model
                .forward_batch(&mut state, &tokens[17..], pocket::model::Logits::All)
                .unwrap(),
        );
        let vocab = m.model.spec.vocab_size;
        let mut worst = 0.0f32;
        for (pos, want) in expected.iter().enumerate() {
            for (a, b) in got[pos * vocab..(pos + 1) * vocab]
                .iter()
                .zip(want.as_array().unwrap())
            {
                worst = worst.max((a - b.as_f64().unwrap() as f32).abs());
            }
        }
        assert!(worst <= 1e-4, "{name}: batched max abs logit error {worst}");
    }
}
