//! `.pocket` reader. Nothing from the file is trusted: the prefix, header length, header
//! checksum, every tensor's type, shape, size and offset are checked against the file size
//! before the file is used, and sizes are computed with checked arithmetic.

use super::{
    hex64, BlobEntry, Layout, PocketHeader, TensorEntry, ALIGN, MAGIC, MAX_BLOB, MAX_HEADER,
    MIN_VERSION, PREFIX_LEN, VERSION,
};
use crate::bytes::ByteView;
use crate::FormatError;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct PocketFile {
    pub path: PathBuf,
    pub header: PocketHeader,
    data: ByteView,
    index: HashMap<String, usize>,
}

/// A tensor inside a mapped `.pocket` file.
#[derive(Clone)]
pub struct PocketTensor {
    pub entry: TensorEntry,
    /// The stored bytes, in `entry.layout`.
    pub data: ByteView,
}

impl PocketTensor {
    /// The bytes in the codec's row-major form, whatever the stored layout (a copy only when
    /// the layout differs).
    pub fn row_major(&self) -> Cow<'_, [u8]> {
        match self.entry.layout {
            Layout::Rows => Cow::Borrowed(self.data.as_slice()),
            Layout::Rows16 => {
                let (rows, cols) = self.entry.matrix_shape().expect("checked at open");
                Cow::Owned(
                    crate::quant::rows16::unpack(
                        self.entry.dtype,
                        self.data.as_slice(),
                        rows,
                        cols,
                    )
                    .expect("checked at open"),
                )
            }
        }
    }
}

impl PocketFile {
    /// True if the file starts with the `.pocket` magic.
    pub fn sniff(path: &Path) -> bool {
        use std::io::Read;
        let mut m = [0u8; 8];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut m))
            .is_ok()
            && &m == MAGIC
    }

    pub fn open(path: &Path) -> Result<PocketFile, FormatError> {
        let bad = |reason: String| FormatError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let file = ByteView::map_file(path)?;
        let bytes = file.as_slice();
        let size = bytes.len() as u64;
        if size < PREFIX_LEN as u64 {
            return Err(bad(format!(
                "file is {size} bytes, too short for a .pocket header"
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(bad("not a .pocket file (bad magic)".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(bad(format!(
                "format version {version} is not supported (this pocket reads {MIN_VERSION} to {VERSION})"
            )));
        }
        let header_len = u64_at(16);
        if header_len > MAX_HEADER || header_len > size - PREFIX_LEN as u64 {
            return Err(bad(format!(
                "header length {header_len} at byte 16 runs past the end of the {size}-byte file"
            )));
        }
        let json = &bytes[PREFIX_LEN..PREFIX_LEN + header_len as usize];
        if xxhash_rust::xxh3::xxh3_64(json) != u64_at(24) {
            return Err(bad("header checksum mismatch: the file is corrupted".into()));
        }
        let header: PocketHeader =
            serde_json::from_slice(json).map_err(|e| bad(format!("invalid header JSON: {e}")))?;
        let data_start = u32_at(12) as u64;
        if data_start % ALIGN as u64 != 0 || data_start < PREFIX_LEN as u64 + header_len {
            return Err(bad(format!("data section offset {data_start} at byte 12 is not a {ALIGN}-aligned offset after the header")));
        }
        if data_start > size {
            return Err(bad(
                "data section starts past the end of the file (truncated?)".into(),
            ));
        }
        let data = file
            .slice(data_start as usize, (size - data_start) as usize)
            .expect("checked");
        let mut index = HashMap::new();
        for (i, t) in header.tensors.iter().enumerate() {
            check_tensor(path, t, data.len() as u64)?;
            if version < 2 && t.layout != Layout::Rows {
                return Err(FormatError::BadTensor {
                    path: path.to_path_buf(),
                    name: t.name.clone(),
                    reason: format!("layout {:?} in a version {version} file", t.layout),
                });
            }
            if index.insert(t.name.clone(), i).is_some() {
                return Err(FormatError::BadTensor {
                    path: path.to_path_buf(),
                    name: t.name.clone(),
                    reason: "appears twice".into(),
                });
            }
        }
        for b in &header.blobs {
            check_range(path, &b.name, b.offset, b.size, data.len() as u64)?;
            if b.raw_size > MAX_BLOB {
                return Err(bad(format!(
                    "blob `{}` claims {} bytes uncompressed",
                    b.name, b.raw_size
                )));
            }
        }
        crate::bytes::check_disjoint(
            path,
            header
                .tensors
                .iter()
                .map(|t| (t.name.as_str(), t.offset, t.size))
                .chain(
                    header
                        .blobs
                        .iter()
                        .map(|b| (b.name.as_str(), b.offset, b.size)),
                ),
        )?;
        Ok(PocketFile {
            path: path.to_path_buf(),
            header,
            data,
            index,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<PocketTensor> {
        let entry = &self.header.tensors[*self.index.get(name)?];
        Some(PocketTensor {
            entry: entry.clone(),
            data: self
                .data
                .slice(entry.offset as usize, entry.size as usize)
                .expect("checked at open"),
        })
    }

    pub fn tensors(&self) -> impl Iterator<Item = &TensorEntry> {
        self.header.tensors.iter()
    }

    /// A blob's contents (inflated), after checking its checksum.
    pub fn blob(&self, name: &str) -> Result<Vec<u8>, FormatError> {
        let bad = |reason: String| FormatError::Invalid {
            path: self.path.clone(),
            reason,
        };
        let b: &BlobEntry = self
            .header
            .blobs
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| bad(format!("no `{name}` blob")))?;
        let stored = self
            .data
            .slice(b.offset as usize, b.size as usize)
            .expect("checked at open");
        if hex64(xxhash_rust::xxh3::xxh3_64(stored.as_slice())) != b.xxh3 {
            return Err(bad(format!(
                "blob `{name}` checksum mismatch: the file is corrupted"
            )));
        }
        let raw = match b.encoding.as_str() {
            "raw" => stored.as_slice().to_vec(),
            "deflate" => miniz_oxide::inflate::decompress_to_vec_with_limit(
                stored.as_slice(),
                b.raw_size as usize,
            )
            .map_err(|e| bad(format!("blob `{name}` does not inflate: {e:?}")))?,
            other => return Err(bad(format!("blob `{name}` has unknown encoding `{other}`"))),
        };
        if raw.len() as u64 != b.raw_size {
            return Err(bad(format!(
                "blob `{name}` inflates to {} bytes, header says {}",
                raw.len(),
                b.raw_size
            )));
        }
        Ok(raw)
    }

    /// Checks every tensor's checksum; returns the names of those that do not match.
    pub fn verify(&self) -> Vec<String> {
        use rayon::prelude::*;
        self.header
            .tensors
            .par_iter()
            .filter(|t| {
                let data = self
                    .data
                    .slice(t.offset as usize, t.size as usize)
                    .expect("checked at open");
                hex64(xxhash_rust::xxh3::xxh3_64(data.as_slice())) != t.xxh3
            })
            .map(|t| t.name.clone())
            .chain(
                self.header
                    .blobs
                    .par_iter()
                    .filter(|b| self.blob(&b.name).is_err())
                    .map(|b| format!("blob {}", b.name)),
            )
            .collect()
    }
}

fn check_tensor(path: &Path, t: &TensorEntry, data_len: u64) -> Result<(), FormatError> {
    let bad = |reason: String| FormatError::BadTensor {
        path: path.to_path_buf(),
        name: t.name.clone(),
        reason,
    };
    let (rows, cols) = t
        .matrix_shape()
        .ok_or_else(|| bad(format!("shape {:?} is not a vector or matrix", t.shape)))?;
    let expected = t.dtype.byte_size(rows, cols).ok_or_else(|| {
        bad(format!(
            "shape {:?} does not fit storage type {}",
            t.shape, t.dtype
        ))
    })?;
    if expected as u64 != t.size {
        return Err(bad(format!(
            "size {} does not match {} {:?} ({expected} bytes)",
            t.size, t.dtype, t.shape
        )));
    }
    if t.layout == Layout::Rows16 && !crate::quant::rows16::fits(t.dtype, rows, cols) {
        return Err(bad(format!(
            "layout rows16 needs a Q4 (block 32/64/128) or Q8 (block a multiple of 64) matrix with rows a multiple of 16, not {} {:?}",
            t.dtype, t.shape
        )));
    }
    check_range(path, &t.name, t.offset, t.size, data_len)
}

fn check_range(
    path: &Path,
    name: &str,
    offset: u64,
    size: u64,
    data_len: u64,
) -> Result<(), FormatError> {
    let bad = |reason: String| FormatError::BadTensor {
        path: path.to_path_buf(),
        name: name.to_string(),
        reason,
    };
    if offset % ALIGN as u64 != 0 {
        return Err(bad(format!("offset {offset} is not {ALIGN}-byte aligned")));
    }
    match offset.checked_add(size) {
        Some(end) if end <= data_len => Ok(()),
        _ => Err(bad(format!(
            "bytes {offset}..{} run past the end of the {data_len}-byte data section (truncated?)",
            offset.saturating_add(size)
        ))),
    }
}
