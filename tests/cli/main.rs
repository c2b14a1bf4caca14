//! The `pocket` binary as a user runs it: every test here starts the binary (or a terminal
//! around it), so nothing a test does in-process can change another's result. One test binary
//! for all of them: each integration-test binary links the whole engine, and linking was most
//! of a cold `cargo test` (issue #19).

#[path = "../common/mod.rs"]
mod common;

mod atomic_output;
mod bad_input;
mod chat_pty;
mod commands;
mod eval_cli;
mod fuzz_corpus;
mod mnn_export;
mod run_options;
#[cfg(feature = "serve")]
mod serve;
