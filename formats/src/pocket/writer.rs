//! Streaming, atomic `.pocket` writer. The layout (every offset) is planned up front from the
//! tensor types and shapes; tensors are then written one at a time in plan order, and the
//! checksums are patched into the header at the end (fixed-width hex, so the header keeps its
//! length). Everything goes to a temporary file in the target directory, which is fsynced and
//! renamed over the final name only when complete; on error or drop it is removed.

use super::{align_up, hex64, PocketHeader, ALIGN, MAGIC, PREFIX_LEN, VERSION};
use crate::atomic::AtomicFile;
use crate::FormatError;
use std::path::{Path, PathBuf};

const PLACEHOLDER: &str = "0000000000000000";
const HEADER_SLACK: usize = 1024;

pub struct PocketWriter {
    file: AtomicFile,
    dest: PathBuf,
    header: PocketHeader,
    data_start: u64,
    /// Next item to write: blobs first, then tensors, in header order.
    next: usize,
    pos: u64,
}

impl PocketWriter {
    /// Plans the file from `header` (its `offset`, `size` and `xxh3` fields are filled here;
    /// blob sizes must be set by the caller) and opens the temporary file.
    pub fn create(dest: &Path, header: PocketHeader) -> Result<PocketWriter, FormatError> {
        let (header, json, data_start, _) = plan(dest, header)?;
        let overflow = || FormatError::Invalid {
            path: dest.to_path_buf(),
            reason: "model too large".into(),
        };
        if data_start > u32::MAX as u64 {
            return Err(overflow());
        }
        let mut file = AtomicFile::create(dest)?;
        file.write_all(&prefix(&json, data_start))?;
        file.write_all(&json)?;
        file.write_zeros(data_start as usize - PREFIX_LEN - json.len())?;
        Ok(PocketWriter {
            file,
            dest: dest.to_path_buf(),
            header,
            data_start,
            next: 0,
            pos: 0,
        })
    }

    pub fn header(&self) -> &PocketHeader {
        &self.header
    }

    /// Replaces the provenance (source hashes are computed while tensors are written). The new
    /// header must not cross into the data section: hashes are fixed-width, so it does not.
    pub fn set_provenance(&mut self, p: super::Provenance) {
        self.header.provenance = p;
    }

    /// Writes the next item's bytes (blobs, then tensors, in header order).
    pub fn write_next(&mut self, bytes: &[u8]) -> Result<(), FormatError> {
        let nb = self.header.blobs.len();
        let (name, offset, size) =
            if self.next < nb {
                let b = &self.header.blobs[self.next];
                (b.name.clone(), b.offset, b.size)
            } else {
                let t = self.header.tensors.get(self.next - nb).ok_or_else(|| {
                    FormatError::Invalid {
                        path: self.dest.clone(),
                        reason: "more items written than declared".into(),
                    }
                })?;
                (t.name.clone(), t.offset, t.size)
            };
        if bytes.len() as u64 != size {
            return Err(FormatError::BadTensor {
                path: self.dest.clone(),
                name,
                reason: format!("{} bytes written, {} declared", bytes.len(), size),
            });
        }
        let hash = hex64(xxhash_rust::xxh3::xxh3_64(bytes));
        if self.next < nb {
            self.header.blobs[self.next].xxh3 = hash;
        } else {
            self.header.tensors[self.next - nb].xxh3 = hash;
        }
        self.file.write_zeros((offset - self.pos) as usize)?;
        self.file.write_all(bytes)?;
        self.pos = offset + size;
        self.next += 1;
        Ok(())
    }

    /// Patches the checksums in, syncs, and renames the file into place.
    pub fn finish(mut self) -> Result<PocketHeader, FormatError> {
        let expected = self.header.blobs.len() + self.header.tensors.len();
        if self.next != expected {
            return Err(FormatError::Invalid {
                path: self.dest.clone(),
                reason: format!("{} of {expected} items written", self.next),
            });
        }
        let json = serde_json::to_vec(&self.header).expect("serialised before");
        if PREFIX_LEN as u64 + json.len() as u64 > self.data_start {
            return Err(FormatError::Invalid {
                path: self.dest.clone(),
                reason: "header grew past the data section while writing".into(),
            });
        }
        // Pad the end so the last item is followed by alignment, like every other.
        let end = align_up(self.pos).unwrap_or(self.pos);
        self.file.write_zeros((end - self.pos) as usize)?;
        self.file.rewind()?;
        self.file.write_all(&prefix(&json, self.data_start))?;
        self.file.write_all(&json)?;
        self.file.commit()?;
        Ok(self.header.clone())
    }

    pub fn temp_path(&self) -> &Path {
        self.file.temp_path()
    }
}

/// The 32-byte prefix for a header `json` and a data section at `data_start`.
fn prefix(json: &[u8], data_start: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(PREFIX_LEN);
    p.extend_from_slice(MAGIC);
    p.extend_from_slice(&VERSION.to_le_bytes());
    p.extend_from_slice(&(data_start as u32).to_le_bytes());
    p.extend_from_slice(&(json.len() as u64).to_le_bytes());
    p.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(json).to_le_bytes());
    debug_assert_eq!(p.len(), PREFIX_LEN);
    p
}

/// Fills in `header`'s offsets, sizes and checksum placeholders; returns it with its JSON, the
/// offset where data starts and the data's length (padded to alignment).
fn plan(
    dest: &Path,
    mut header: PocketHeader,
) -> Result<(PocketHeader, Vec<u8>, u64, u64), FormatError> {
    let mut offset = 0u64;
    let overflow = || FormatError::Invalid {
        path: dest.to_path_buf(),
        reason: "model too large".into(),
    };
    for b in &mut header.blobs {
        b.offset = offset;
        b.xxh3 = PLACEHOLDER.into();
        offset = align_up(offset.checked_add(b.size).ok_or_else(overflow)?).ok_or_else(overflow)?;
    }
    for t in &mut header.tensors {
        let (rows, cols) = t.matrix_shape().ok_or_else(|| FormatError::BadTensor {
            path: dest.to_path_buf(),
            name: t.name.clone(),
            reason: format!("shape {:?} is not a vector or matrix", t.shape),
        })?;
        t.size = t
            .dtype
            .byte_size(rows, cols)
            .ok_or_else(|| FormatError::BadTensor {
                path: dest.to_path_buf(),
                name: t.name.clone(),
                reason: format!("shape {:?} does not fit storage type {}", t.shape, t.dtype),
            })? as u64;
        t.offset = offset;
        t.xxh3 = PLACEHOLDER.into();
        offset = align_up(offset.checked_add(t.size).ok_or_else(overflow)?).ok_or_else(overflow)?;
    }
    let json = serde_json::to_vec(&header).map_err(|e| FormatError::Invalid {
        path: dest.to_path_buf(),
        reason: format!("cannot serialise header: {e}"),
    })?;
    // Slack for what is filled in while writing (provenance sizes and hashes).
    let data_start =
        align_up((PREFIX_LEN + json.len() + HEADER_SLACK) as u64).ok_or_else(overflow)?;

    Ok((header, json, data_start, offset))
}

/// The bytes a file written from `header` takes (the tensors' sizes come from their types and
/// shapes), without writing it: what `pocket export --size` fits its choice to.
pub fn planned_bytes(header: PocketHeader) -> Result<u64, FormatError> {
    let (_, _, data_start, data) = plan(Path::new("(planned)"), header)?;
    Ok(data_start + data)
}

const _: () = assert!(ALIGN.is_power_of_two());
