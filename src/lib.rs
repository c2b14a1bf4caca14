//! pocket's engine: model weights, the forward pass, tokenizer and chat template, sampling and
//! the generation loop. File formats live in the `pocket-formats` crate, the compute kernels in
//! `pocket-kernels`; the CLI in `cmd/`.
//!
//! The forward pass in [`model`] is the reference path: plain f32 math that reads top to
//! bottom, proven equal to Hugging Face transformers by the fixture tests. Speed comes from the
//! kernels behind [`weights::Matrix`], chosen by storage type, never from changing the model
//! code.

pub mod alloc_guard;
pub mod attention;
pub mod batch;
pub mod budget;
pub mod calibrate;
pub mod chat;
pub mod chat_template;
pub mod config;
pub mod constrain;
pub mod decide;
pub mod error;
pub mod generate;
pub mod gram;
pub mod kv_cache;
pub mod loader;
pub mod lora;
pub mod model;
pub mod pool;
pub mod rope;
pub mod sampler;
pub mod serving;
pub mod speculate;
pub mod tokenizer;
pub mod tokenizer_fast;
pub mod weights;

pub use error::Error;
pub use pocket_formats as formats;
/// The compute kernels are their own crate (kernels/), below the engine: `crate::kernels::…`
/// paths read as before.
pub use pocket_kernels as kernels;
