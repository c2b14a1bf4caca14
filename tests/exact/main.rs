//! Tests that pin the exact path: they compare logits with transformers and gguf-py on f32
//! activations (`common::max_logit_error` switches the process to it), so they share a binary
//! apart from the tests that run the default int8 kernels. GGUF import and export, QAT import,
//! and the opt-in real Gemma 3 checks (`--ignored`).

#[path = "../common/mod.rs"]
mod common;

mod gguf_export;
mod gguf_import;
mod qat_import;
mod real_gemma3;
mod refactor_guard;
