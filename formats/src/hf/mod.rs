//! Hugging Face checkpoints: a directory with `config.json`, safetensors weights, and the
//! tokenizer files. Only the bytes: turning tensors into a model is the engine's job.

pub mod checkpoint;
pub mod compressed_tensors;
pub mod config;
pub mod json;
pub mod safetensors;
pub mod tokenizer_config;

pub use checkpoint::HfCheckpoint;
pub use config::{
    Activation, Family, GenerationConfig, ModelSpec, RopeConfig, RopeScaling, Sliding,
};
pub use safetensors::{DType, MappedTensor, SafetensorsFile};
pub use tokenizer_config::TokenizerConfig;
