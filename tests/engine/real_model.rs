//! Opt-in: the real SmolLM2-135M-Instruct checkpoint (bf16 weights, f32 compute) against the
//! outputs transformers recorded in fixtures/smollm2-reference.json (scripts/hf_reference.py).
//!
//! Run with `scripts/check-real-model.sh` (it fetches and converts the model first), or
//! `POCKET_REAL_MODEL=DIR cargo test --release --test engine real_model -- --ignored`.

use pocket::chat_template::Message;
use pocket::loader::LoadedModel;
use serde_json::Value;

use crate::common;
use common::ids;
use std::path::PathBuf;

const WHY: &str = "needs the SmolLM2 HF checkpoint models/smollm2-135m-instruct: scripts/check-real-model.sh makes it with transformers";

fn load() -> (LoadedModel, Value) {
    let root = crate::common::root();
    let dir = std::env::var_os("POCKET_REAL_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("models/smollm2-135m-instruct"));
    let m = crate::common::open(&dir).unwrap_or_else(|e| panic!("{e} ({WHY})"));
    let r = std::fs::read_to_string(root.join("fixtures/smollm2-reference.json")).unwrap();
    (m, serde_json::from_str(&r).unwrap())
}

#[test]
#[ignore = "tier hf-reference: needs the SmolLM2 HF checkpoint models/smollm2-135m-instruct (scripts/check-real-model.sh makes it with transformers)"]
fn smollm2_greedy_tokens_equal_transformers() {
    let (m, r) = load();
    for case in r["greedy"].as_array().unwrap() {
        let (got, want, text) = common::greedy_case(&m, case, 32);
        let prompt = &case["prompt"];
        eprintln!("{prompt} -> {text:?} ({} tokens)", got.len());
        assert_eq!(got, want, "greedy tokens for {prompt:?}");
        assert_eq!(text, case["text"].as_str().unwrap());
    }
    let first = &r["greedy"][0];
    assert_eq!(first["text"], "The capital of France is Paris.");
}

#[test]
#[ignore = "tier hf-reference: needs the SmolLM2 HF checkpoint models/smollm2-135m-instruct (scripts/check-real-model.sh makes it with transformers)"]
fn smollm2_tokenizer_and_template_equal_transformers() {
    let (m, r) = load();
    common::assert_tokenizes(&m, &r["tokenize"]);
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
