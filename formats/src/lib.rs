//! Bytes on disk for pocket.
//!
//! Everything that reads or writes a model file lives here, and nothing here knows about the
//! engine: the engine (`pocket`) depends on this crate, never the other way round.
//!
//! - [`hf`]: Hugging Face checkpoints — `config.json` (transformers 4 and 5 key styles),
//!   `model.safetensors` or a sharded `model.safetensors.index.json`, memory-mapped.

pub mod atomic;
pub mod budget;
pub mod bytes;
pub mod convert;
pub mod error;
pub mod finite;
pub mod gguf;
pub mod hf;
pub mod lora;
pub mod mnn;
pub mod model_file;
pub mod pocket;
pub mod quant;
pub mod recipe;
pub mod sniff;
pub mod stored;

pub use error::FormatError;
