//! Hostile System One requests and decision head files: a request is read and checked, then
//! planned (rendered, escaped, tokenized) and answered on the tiny qwen2 fixture; a head file
//! is read and checked. Errors are fine; panics, hangs and runaway memory are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
extern crate pocket_fuzz;
use pocket::decide::{Decider, Head, Settings};
use pocket::loader::LoadedModel;
use pocket_fuzz::inputs::split_decision;
use std::path::Path;
use std::sync::OnceLock;

fn model() -> &'static LoadedModel {
    static M: OnceLock<LoadedModel> = OnceLock::new();
    M.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tiny/qwen2-tiny");
        LoadedModel::open(&dir).expect("the tiny fixture")
    })
}

fuzz_target!(|data: &[u8]| {
    let (request, bytes) = split_decision(data);
    if !request {
        let _ = Head::from_bytes(bytes, Path::new("fuzz.head"));
        return;
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return;
    };
    let m = model();
    let Ok(decider) = Decider::new(m, Settings::default()) else {
        return;
    };
    let Ok(req) = decider.parse(&body) else {
        return;
    };
    let Ok(plan) = decider.plan(&req, 256) else {
        return;
    };
    let mut state = m.model.new_state(256);
    if let Ok((scores, _)) = decider.run(&mut state, &mut Vec::new(), &plan, false) {
        let _ = decider.response("fuzz", &req, &plan, &scores);
    }
});
