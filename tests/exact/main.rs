//! Tests that pin the exact path: they compare logits with transformers and gguf-py on f32
//! activations and an f32 cache (every model here opens with `common::open_exact`). GGUF import
//! and export, QAT import, the opt-in real Gemma 3 checks and the refactor guard (`--ignored`).

#[path = "../common/mod.rs"]
mod common;

mod decide;
mod gguf_export;
mod gguf_import;
mod lora;
mod qat_import;
mod real_gemma3;
mod refactor_guard;
