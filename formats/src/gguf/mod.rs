//! GGUF, the llama.cpp file format: reading (header, metadata, tensor table, ggml block types).
//! Writing arrives with the GGUF export.

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
