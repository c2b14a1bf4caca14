//! What kind of model file a path is, decided once for every reader (the engine's loader and
//! the conversion source both ask here), with the one error message for a path that is none.

use crate::gguf::GgufFile;
use crate::hf::HfCheckpoint;
use crate::pocket::reader::PocketFile;
use crate::FormatError;
use std::path::Path;

/// The model files pocket reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory with `config.json` and safetensors weights.
    Hf,
    /// A `.pocket` file (recognised by its magic, not its name).
    Pocket,
    /// A llama.cpp GGUF file (by its magic).
    Gguf,
}

/// An MNN LLM package: the directory `pocket export --format mnn` writes. It has a
/// `config.json` too, so it must be told apart before a directory is taken for a checkpoint.
pub fn is_mnn_package(path: &Path) -> bool {
    path.is_dir() && path.join("llm.mnn").is_file() && path.join("llm_config.json").is_file()
}

/// The kind of model at `path`, or an error naming the path and what pocket reads instead.
pub fn sniff(path: &Path) -> Result<Kind, FormatError> {
    let invalid = |reason: String| FormatError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    if !path.exists() {
        return Err(invalid("no such file or directory".into()));
    }
    if is_mnn_package(path) {
        return Err(invalid(
            "an MNN package (llm.mnn, llm_config.json): pocket writes these for MNN's runtime but \
             does not run them; run the .pocket, GGUF or HF checkpoint it was exported from, and \
             MNN's llm_demo on this directory"
                .into(),
        ));
    }
    if HfCheckpoint::is_checkpoint_dir(path) {
        return Ok(Kind::Hf);
    }
    if path.is_file() && PocketFile::sniff(path) {
        return Ok(Kind::Pocket);
    }
    if path.is_file() && GgufFile::sniff(path) {
        return Ok(Kind::Gguf);
    }
    Err(invalid(if path.is_dir() {
        "a directory without config.json: pocket reads an HF checkpoint directory (config.json + \
         *.safetensors), a .pocket file or a GGUF file"
            .into()
    } else {
        "not a model pocket can read: expected an HF checkpoint directory (config.json + \
         *.safetensors), a .pocket file or a GGUF file"
            .into()
    }))
}
