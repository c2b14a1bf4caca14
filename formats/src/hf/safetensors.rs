//! One `.safetensors` file, memory-mapped. The header is validated by the `safetensors` crate
//! (offsets contiguous, sizes equal to shape × dtype, data ending exactly at the end of the
//! file) before any tensor is handed out, so a [`MappedTensor`]'s byte range is always inside
//! the mapping.

use crate::bytes::ByteView;
use crate::FormatError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Element types pocket reads from checkpoints. Anything else is kept by name so `inspect`
/// can show it, and refused when the engine asks for it as a weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
    Other(String),
}

impl DType {
    pub fn name(&self) -> &str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Other(s) => s,
        }
    }

    /// Bytes per element, for the types the engine reads.
    pub fn size(&self) -> Option<usize> {
        match self {
            DType::F32 => Some(4),
            DType::F16 | DType::BF16 => Some(2),
            DType::Other(_) => None,
        }
    }

    fn from_safetensors(d: safetensors::Dtype) -> DType {
        match d {
            safetensors::Dtype::F32 => DType::F32,
            safetensors::Dtype::F16 => DType::F16,
            safetensors::Dtype::BF16 => DType::BF16,
            other => DType::Other(format!("{other:?}")),
        }
    }
}

/// A tensor inside a memory-mapped file: no copy is made until a reader asks for values.
#[derive(Clone)]
pub struct MappedTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    data: ByteView,
}

impl std::fmt::Debug for MappedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {:?}", self.name, self.dtype.name(), self.shape)
    }
}

impl MappedTensor {
    /// The raw little-endian bytes of the tensor.
    pub fn bytes(&self) -> &[u8] {
        self.data.as_slice()
    }

    /// The bytes as a shareable view (no copy).
    pub fn view(&self) -> &ByteView {
        &self.data
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// All values widened to f32 (a copy). For small tensors such as norms and biases.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        let b = self.bytes();
        Some(match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::Other(_) => return None,
        })
    }
}

/// Per-tensor checks made before the `safetensors` crate's own validation, so an error names
/// the tensor and the numbers that do not fit (the crate's messages do not always say which).
fn check_tensor_table(map: &[u8], bad: &dyn Fn(String) -> FormatError) -> Result<(), FormatError> {
    let size = map.len() as u64;
    let declared = u64::from_le_bytes(map[..8].try_into().expect("file has at least 8 bytes"));
    if declared > size - 8 {
        return Err(bad(format!(
            "header length {declared} runs past the end of the {size}-byte file (truncated?)"
        )));
    }
    let data_len = size - 8 - declared;
    let header: serde_json::Value = match serde_json::from_slice(&map[8..8 + declared as usize]) {
        Ok(v) => v,
        Err(e) => return Err(bad(format!("header is not valid JSON: {e}"))),
    };
    let Some(table) = header.as_object() else {
        return Err(bad("header is not a JSON object".into()));
    };
    if let Some(k) = super::json::duplicate_key(&map[8..8 + declared as usize]) {
        return Err(bad(format!("tensor `{k}` appears twice in the header")));
    }
    for (name, info) in table.iter().filter(|(k, _)| *k != "__metadata__") {
        let elem: u64 = match info.get("dtype").and_then(|d| d.as_str()) {
            Some("F64" | "I64" | "U64") => 8,
            Some("F32" | "I32" | "U32") => 4,
            Some("F16" | "BF16" | "I16" | "U16") => 2,
            Some("I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2") => 1,
            _ => continue, // left to the crate, which knows every dtype
        };
        let shape: Option<Vec<u64>> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let offsets: Option<Vec<u64>> = info
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let (Some(shape), Some(offsets)) = (shape, offsets) else {
            return Err(bad(format!(
                "tensor `{name}`: shape or data_offsets is not a list of integers"
            )));
        };
        let [begin, end] = offsets[..] else {
            return Err(bad(format!(
                "tensor `{name}`: data_offsets must have two entries"
            )));
        };
        let bytes = shape.iter().try_fold(elem, |acc, &d| acc.checked_mul(d));
        let Some(bytes) = bytes else {
            return Err(bad(format!("tensor `{name}`: shape {shape:?} overflows")));
        };
        if begin > end || end > data_len {
            return Err(bad(format!(
                "tensor `{name}`: data_offsets [{begin}, {end}] run past the end of the {data_len}-byte data section (file truncated?)"
            )));
        }
        if end - begin != bytes {
            return Err(bad(format!(
                "tensor `{name}`: shape {shape:?} needs {bytes} bytes but data_offsets [{begin}, {end}] hold {}",
                end - begin
            )));
        }
    }
    Ok(())
}

/// One safetensors file and its tensor table.
pub struct SafetensorsFile {
    pub path: PathBuf,
    pub tensors: BTreeMap<String, MappedTensor>,
    /// The optional `__metadata__` string map.
    pub metadata: BTreeMap<String, String>,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<SafetensorsFile, FormatError> {
        let size = std::fs::metadata(path)
            .map_err(|e| FormatError::io(path, e))?
            .len();
        let bad = |reason: String| FormatError::Safetensors {
            path: path.to_path_buf(),
            reason,
        };
        if size < 8 {
            return Err(bad(format!(
                "file is {size} bytes, too short for the 8-byte header length"
            )));
        }
        let file = ByteView::map_file(path)?;
        let map = file.as_slice();
        if map.len() as u64 != size {
            return Err(bad("file changed while it was being opened".into()));
        }
        check_tensor_table(map, &bad)?;
        let (header_len, meta) = safetensors::SafeTensors::read_metadata(map).map_err(|e| {
            let declared = u64::from_le_bytes(map[..8].try_into().unwrap_or([0; 8]));
            bad(match e {
                safetensors::SafeTensorError::InvalidHeaderLength => format!(
                    "header length {declared} runs past the end of the {size}-byte file (truncated?)"
                ),
                safetensors::SafeTensorError::MetadataIncompleteBuffer => format!(
                    "tensor data does not end at the end of the {size}-byte file (truncated or padded?)"
                ),
                other => other.to_string(),
            })
        })?;
        let data_start = 8 + header_len;
        let mut tensors = BTreeMap::new();
        for (name, info) in meta.tensors() {
            let (s, e) = info.data_offsets;
            // Already validated by read_metadata; checked again so this module's invariant does
            // not depend on another crate's internals.
            let (start, end) = (data_start.checked_add(s), data_start.checked_add(e));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(bad(format!("tensor `{name}`: offsets overflow")));
            };
            if start > end || end > map.len() {
                return Err(bad(format!(
                    "tensor `{name}`: offsets {s}..{e} run past the end of the file"
                )));
            }
            tensors.insert(
                name.clone(),
                MappedTensor {
                    name: name.clone(),
                    dtype: DType::from_safetensors(info.dtype),
                    shape: info.shape.clone(),
                    data: file.slice(start, end - start).expect("range checked above"),
                },
            );
        }
        let metadata = meta
            .metadata()
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Ok(SafetensorsFile {
            path: path.to_path_buf(),
            tensors,
            metadata,
        })
    }
}
