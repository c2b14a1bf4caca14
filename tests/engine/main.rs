//! The engine library in-process, on the default kernels: transformers parity on the tiny
//! fixtures, batching, chat sessions, the `.pocket` format, streaming text, and the opt-in
//! real-model checks (`--ignored`). Tests that switch the process to the exact f32 path live in
//! the `exact` binary, so they cannot change the path these tests run on.

#[path = "../common/mod.rs"]
mod common;

mod batch_generation;
mod chat_session;
mod gptq;
mod long_context;
mod pocket_format;
mod real_model;
mod serving;
mod size_budget;
mod speculative;
mod streaming;
mod structured;
mod transformers_parity;
