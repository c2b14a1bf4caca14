//! Hostile LoRA adapters: a PEFT directory (`[u16 n][adapter_config.json][safetensors]`) or a
//! GGUF LoRA file (after an odd selector byte), read, checked against the tiny qwen2 fixture,
//! and run for two tokens. Errors are fine; panics, hangs and runaway memory are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
extern crate pocket_fuzz;
use pocket::loader::LoadedModel;
use pocket::lora::AdapterSet;
use pocket_fuzz::inputs::{split_decision, write_adapter};
use std::path::Path;
use std::sync::{Arc, OnceLock};

fn model() -> &'static LoadedModel {
    static M: OnceLock<LoadedModel> = OnceLock::new();
    M.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tiny/qwen2-tiny");
        LoadedModel::open(&dir).expect("the tiny fixture")
    })
}

fuzz_target!(|data: &[u8]| {
    let (peft, bytes) = split_decision(data);
    let dir = std::env::temp_dir().join(format!("pocket-fuzz-lora-{}", std::process::id()));
    let Ok(path) = write_adapter(peft, bytes, &dir) else {
        return;
    };
    let m = model();
    let Ok(a) = m.model.open_adapter(&path, "fuzz") else {
        return;
    };
    let mut st = m.model.new_state(8);
    st.lora = Some(Arc::new(AdapterSet {
        adapters: vec![(Arc::new(a), 1.0)],
    }));
    for t in [1u32, 5] {
        if m.model.step(&mut st, t, true).is_err() {
            return;
        }
    }
});
