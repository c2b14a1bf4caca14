//! Opt-in: the real SmolLM2-135M-Instruct checkpoint (bf16 weights, f32 compute) against the
//! outputs transformers recorded in fixtures/smollm2-reference.json (scripts/hf_reference.py).
//!
//! Run with `scripts/check-real-model.sh` (it fetches and converts the model first), or
//! `POCKET_REAL_MODEL=DIR cargo test --release --test real_model -- --ignored`.

use pocket::chat_template::Message;
use pocket::generate::{generate, Control, FinishReason};
use pocket::loader::LoadedModel;
use pocket::sampler::{Sampler, SamplerConfig};
use serde_json::Value;
use std::path::PathBuf;

const WHY: &str = "needs the SmolLM2 checkpoint: scripts/check-real-model.sh";

fn load() -> (LoadedModel, Value) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("POCKET_REAL_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("models/smollm2-135m-instruct"));
    let m = LoadedModel::open(&dir).unwrap_or_else(|e| panic!("{e} ({WHY})"));
    let r = std::fs::read_to_string(root.join("fixtures/smollm2-reference.json")).unwrap();
    (m, serde_json::from_str(&r).unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
#[ignore = "needs the SmolLM2 checkpoint: scripts/check-real-model.sh"]
fn smollm2_greedy_tokens_equal_transformers() {
    let (m, r) = load();
    for case in r["greedy"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let prompt_ids = m
            .encode_chat(&[Message::new("user", prompt)], true)
            .unwrap();
        assert_eq!(
            prompt_ids,
            ids(&case["prompt_ids"]),
            "prompt ids for {prompt:?}"
        );
        let want = ids(&case["generated_ids"]);
        let mut state = m.model.new_state(1024);
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
        let mut got = g.tokens.clone();
        if g.finish_reason == FinishReason::Stop {
            got.push(*want.last().unwrap());
        }
        let text = m.tokenizer.decode(&g.tokens, true);
        eprintln!("{prompt:?} -> {text:?} ({} tokens)", g.tokens.len());
        assert_eq!(got, want, "greedy tokens for {prompt:?}");
        assert_eq!(text, case["text"].as_str().unwrap());
    }
    let first = &r["greedy"][0];
    assert_eq!(first["text"], "The capital of France is Paris.");
}

#[test]
#[ignore = "needs the SmolLM2 checkpoint: scripts/check-real-model.sh"]
fn smollm2_tokenizer_and_template_equal_transformers() {
    let (m, r) = load();
    for (kind, case) in r["tokenize"].as_object().unwrap() {
        let text = case["text"].as_str().unwrap();
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
    let messages: Vec<Message> = serde_json::from_value(r["chat"]["messages"].clone()).unwrap();
    assert_eq!(
        m.render_chat(&messages, true).unwrap(),
        r["chat"]["rendered"].as_str().unwrap()
    );
    assert_eq!(
        m.encode_chat(&messages, true).unwrap(),
        ids(&r["chat"]["ids"])
    );
    assert_eq!(m.file.parameter_count(), 134_515_008);
    assert_eq!(r["parameters"], 134_515_008);
}
