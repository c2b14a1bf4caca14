//! Streaming, atomic GGUF v3 writer: metadata and the tensor table first (every offset is known
//! from the declared types and shapes), then tensor data, each aligned to 32 bytes. The file is
//! written under a temporary name in the target directory and renamed into place when complete;
//! on error or drop the temporary file is removed.

use super::ggml::GgmlType;
use super::reader::GgufValue;
use crate::atomic::AtomicFile;
use crate::FormatError;
use std::path::{Path, PathBuf};

pub const ALIGNMENT: u64 = 32;

pub struct TensorDecl {
    pub name: String,
    /// GGUF order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
}

pub struct GgufWriter {
    out: AtomicFile,
    dest: PathBuf,
    sizes: Vec<u64>,
    next: usize,
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    w.extend_from_slice(&(s.len() as u64).to_le_bytes());
    w.extend_from_slice(s.as_bytes());
}

fn type_id(v: &GgufValue) -> u32 {
    match v {
        GgufValue::U8(_) => 0,
        GgufValue::I8(_) => 1,
        GgufValue::U16(_) => 2,
        GgufValue::I16(_) => 3,
        GgufValue::U32(_) => 4,
        GgufValue::I32(_) => 5,
        GgufValue::F32(_) => 6,
        GgufValue::Bool(_) => 7,
        GgufValue::Str(_) => 8,
        GgufValue::Array(_) => 9,
        GgufValue::U64(_) => 10,
        GgufValue::I64(_) => 11,
        GgufValue::F64(_) => 12,
    }
}

fn put_value(w: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => w.push(*x),
        GgufValue::I8(x) => w.push(*x as u8),
        GgufValue::U16(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => w.push(u8::from(*x)),
        GgufValue::Str(s) => put_str(w, s),
        GgufValue::Array(items) => {
            // GGUF arrays are homogeneous; an empty one is declared as strings.
            w.extend_from_slice(&items.first().map_or(8, type_id).to_le_bytes());
            w.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| put_value(w, i));
        }
        GgufValue::U64(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => w.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => w.extend_from_slice(&x.to_le_bytes()),
    }
}

impl GgufWriter {
    pub fn create(
        dest: &Path,
        metadata: &[(String, GgufValue)],
        tensors: &[TensorDecl],
    ) -> Result<GgufWriter, FormatError> {
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata {
            put_str(&mut head, k);
            head.extend_from_slice(&type_id(v).to_le_bytes());
            put_value(&mut head, v);
        }
        let mut offset = 0u64;
        let mut sizes = Vec::new();
        for t in tensors {
            let n: u64 = t.dims.iter().product();
            let size = t.ty.bytes_for(n).ok_or_else(|| FormatError::BadTensor {
                path: dest.to_path_buf(),
                name: t.name.clone(),
                reason: format!("{n} elements do not fill whole {} blocks", t.ty.name()),
            })?;
            put_str(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            t.dims
                .iter()
                .for_each(|d| head.extend_from_slice(&d.to_le_bytes()));
            head.extend_from_slice(&t.ty.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            sizes.push(size);
            offset = (offset + size).div_ceil(ALIGNMENT) * ALIGNMENT;
        }
        head.resize(
            (head.len() as u64).div_ceil(ALIGNMENT) as usize * ALIGNMENT as usize,
            0,
        );
        let mut out = AtomicFile::create(dest)?;
        out.write_all(&head)?;
        Ok(GgufWriter {
            out,
            dest: dest.to_path_buf(),
            sizes,
            next: 0,
        })
    }

    /// The next tensor's data, in declaration order.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<(), FormatError> {
        let size = *self
            .sizes
            .get(self.next)
            .ok_or_else(|| FormatError::Invalid {
                path: self.dest.clone(),
                reason: "more tensors than declared".into(),
            })?;
        if data.len() as u64 != size {
            return Err(FormatError::Invalid {
                path: self.dest.clone(),
                reason: format!(
                    "tensor {}: {} bytes, {size} declared",
                    self.next,
                    data.len()
                ),
            });
        }
        self.out.write_all(data)?;
        self.out
            .write_zeros((size.div_ceil(ALIGNMENT) * ALIGNMENT - size) as usize)?;
        self.next += 1;
        Ok(())
    }

    pub fn finish(self) -> Result<(), FormatError> {
        if self.next != self.sizes.len() {
            return Err(FormatError::Invalid {
                path: self.dest.clone(),
                reason: format!("{} of {} tensors written", self.next, self.sizes.len()),
            });
        }
        self.out.commit()
    }
}
