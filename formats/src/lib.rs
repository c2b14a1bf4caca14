//! Bytes on disk for pocket.
//!
//! Everything that reads or writes a model file lives here, and nothing here knows about the
//! engine: the engine (`pocket`) depends on this crate, never the other way round.
//!
//! - Reading: [`sniff`] (what kind of file a path is), [`model_file`] (any model file opened
//!   once, its tensors by Hugging Face name as [`stored`] tensors over [`bytes`] views),
//!   [`hf`] (checkpoints: `config.json` in transformers 4 and 5 key styles, safetensors, sharded
//!   indexes), [`gguf`] (llama.cpp's files, their tokenizers and ggml blocks), [`pocket`] (the
//!   `.pocket` file), [`lora`] (PEFT and GGUF adapters).
//! - Writing: [`convert`] (any source → `.pocket`), [`gguf`]'s and [`mnn`]'s exports, each file
//!   whole or not at all ([`atomic`]); [`finite`] refuses NaN/Inf weights first.
//! - Storage: [`quant`] (the storage types, the block codecs and their scale search, GPTQ),
//!   [`recipe`] (which type each tensor gets) and [`budget`] (the choice within a size).

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
