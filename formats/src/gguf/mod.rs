//! GGUF, the llama.cpp file format: reading (header, metadata, tensor table, ggml block types:
//! reader.rs, codes.rs, ggml.rs), import as a model (model.rs, import.rs, tokenizer.rs), and
//! the GGUF export (writer.rs, export.rs, with the calibrated ggml encoders of quantize.rs and
//! quantize5.rs).

pub mod codes;
pub mod export;
pub mod ggml;
pub mod import;
pub mod model;
pub mod quantize;
mod quantize5;
pub mod reader;
pub mod tokenizer;
pub mod writer;

pub use ggml::{GgmlType, IQ4NL_VALUES};
pub use reader::{GgufFile, GgufTensor, GgufValue};
