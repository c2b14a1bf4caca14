//! The `.pocket` file: one memory-mappable file holding a quantized model, its tokenizer, chat
//! template and generation defaults. See docs/format.md for the byte layout.
//!
//! ```text
//! 0   8  magic  "POCKET\0\0"
//! 8   4  version (u32 LE) = 2 (1: every tensor row-major; read as well)
//! 12  4  D: byte offset of the data section (u32 LE, a multiple of 64, ≥ 32 + H)
//! 16  8  header length H (u64 LE)
//! 24  8  xxh3-64 of the header bytes (u64 LE)
//! 32  H  header: UTF-8 JSON (PocketHeader)
//! …      zero padding up to D
//!        tensors and blobs at their `offset` (relative to the data section), each 64-aligned
//! ```

pub mod reader;
pub mod writer;

use crate::hf::{GenerationConfig, ModelSpec};
use crate::quant::QuantType;
use serde::{Deserialize, Serialize};

pub const MAGIC: &[u8; 8] = b"POCKET\0\0";
pub const VERSION: u32 = 2;
/// The oldest version this reader accepts (version 1 has no `layout` field).
pub const MIN_VERSION: u32 = 1;
pub const PREFIX_LEN: usize = 32;
pub const ALIGN: usize = 64;
/// Headers are small (the tokenizer is a blob): anything larger is refused before reading.
pub const MAX_HEADER: u64 = 64 << 20;
/// The largest blob we inflate (tokenizers are a few MB).
pub const MAX_BLOB: u64 = 512 << 20;

pub const TOKENIZER_BLOB: &str = "tokenizer.json";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PocketHeader {
    pub format: String,
    pub spec: ModelSpec,
    #[serde(default)]
    pub generation: GenerationConfig,
    pub tokenizer: TokenizerMeta,
    /// How the weights were made: storage types, method, per-tensor overrides, QAT import.
    pub recipe: serde_json::Value,
    pub provenance: Provenance,
    pub blobs: Vec<BlobEntry>,
    pub tensors: Vec<TensorEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizerMeta {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    pub chat_template: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The tool and version that wrote the file.
    pub writer: String,
    /// Where the weights came from (a directory or file).
    pub source: String,
    pub files: Vec<SourceFile>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceFile {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: QuantType,
    /// `[rows, cols]`, or `[len]` for vectors.
    pub shape: Vec<usize>,
    pub offset: u64,
    pub size: u64,
    /// xxh3-64 of the tensor's bytes, 16 hex digits.
    pub xxh3: String,
    /// How a matrix's bytes are ordered (absent: row-major).
    #[serde(default, skip_serializing_if = "Layout::is_rows")]
    pub layout: Layout,
}

/// The byte order of a stored matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Row-major: the codec's own form (`quant::q4`, `quant::q8`, dense types).
    #[default]
    Rows,
    /// Q4/Q8 with 16 rows interleaved, as the SIMD kernels read them (`quant::rows16`).
    Rows16,
}

impl Layout {
    pub fn is_rows(&self) -> bool {
        *self == Layout::Rows
    }
}

impl TensorEntry {
    /// `(rows, cols)` of the tensor viewed as a matrix (a vector is one row).
    pub fn matrix_shape(&self) -> Option<(usize, usize)> {
        match self.shape[..] {
            [n] => Some((1, n)),
            [r, c] => Some((r, c)),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlobEntry {
    pub name: String,
    /// "raw" or "deflate".
    pub encoding: String,
    pub offset: u64,
    pub size: u64,
    pub raw_size: u64,
    pub xxh3: String,
}

pub(crate) fn hex64(v: u64) -> String {
    format!("{v:016x}")
}

pub(crate) fn align_up(v: u64) -> Option<u64> {
    v.checked_add(ALIGN as u64 - 1)
        .map(|x| x / ALIGN as u64 * ALIGN as u64)
}
