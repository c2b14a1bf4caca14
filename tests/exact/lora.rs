//! LoRA adapters against transformers + peft (`fixtures/make_lora_fixtures.py`): on every tiny
//! fixture, the logits at every position of a text with each PEFT adapter (every linear layer;
//! the embedding and the output head; rsLoRA with rank and alpha patterns; a new output head
//! from `modules_to_save`) and with two adapters at once at their scales, on the f32 path.

use crate::common::{open_exact, root};
use pocket::lora::{Adapter, AdapterSet};
use pocket::model::Logits;
use pocket_formats::hf::SafetensorsFile;
use std::sync::Arc;

const TOLERANCE: f32 = 1e-5;

fn reference() -> SafetensorsFile {
    SafetensorsFile::open(&root().join("fixtures/lora/reference.safetensors")).unwrap()
}

#[test]
fn adapters_equal_peft_at_every_position() {
    let r = reference();
    let ids_of = |model: &str| -> Vec<u32> {
        serde_json::from_str(&r.metadata[&format!("{model}.ids")]).unwrap()
    };
    let pair: Vec<(String, f32)> = serde_json::from_str(&r.metadata["pair"]).unwrap();
    let mut checked = 0;
    for model in ["qwen2-tiny", "llama-tiny", "qwen3-tiny", "gemma3-tiny"] {
        let m = open_exact(&root().join("fixtures/tiny").join(model)).unwrap();
        let ids = ids_of(model);
        let open = |name: &str| {
            Arc::new(
                Adapter::open(
                    &m.model,
                    &root().join("fixtures/lora").join(model).join(name),
                    name,
                )
                .unwrap(),
            )
        };
        let mut cases: Vec<(String, AdapterSet)> = ["all", "embed_head", "patterns", "saved"]
            .iter()
            .map(|a| {
                (
                    a.to_string(),
                    AdapterSet {
                        adapters: vec![(open(a), 1.0)],
                    },
                )
            })
            .collect();
        cases.push((
            "pair".into(),
            AdapterSet {
                adapters: pair.iter().map(|(a, s)| (open(a), *s)).collect(),
            },
        ));
        cases.push(("base".into(), AdapterSet::default()));
        for (case, set) in cases {
            let want = r.tensors[&format!("{model}.{case}")].to_f32_vec().unwrap();
            let mut st = m.model.new_state(256);
            st.lora = Some(Arc::new(set));
            let got = m.model.forward_batch(&mut st, &ids, Logits::All).unwrap();
            assert_eq!(got.len(), want.len(), "{model} {case}");
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            eprintln!("{model} {case}: max |logit - peft| = {worst:.2e}");
            let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            eprintln!("  (largest |logit| {scale:.2})");
            assert!(
                worst <= TOLERANCE * scale.max(1.0),
                "{model} {case}: max abs logit error {worst:.2e}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * 6);
}
