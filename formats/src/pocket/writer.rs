//! Streaming, atomic `.pocket` writer. The layout (every offset) is planned up front from the
//! tensor types and shapes; tensors are then written one at a time in plan order, and the
//! checksums are patched into the header at the end (fixed-width hex, so the header keeps its
//! length). Everything goes to a temporary file in the target directory, which is fsynced and
//! renamed over the final name only when complete; on error or drop it is removed.

use super::{align_up, hex64, PocketHeader, ALIGN, MAGIC, PREFIX_LEN, VERSION};
use crate::FormatError;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const PLACEHOLDER: &str = "0000000000000000";
const HEADER_SLACK: usize = 1024;

pub struct PocketWriter {
    file: Option<File>,
    tmp: PathBuf,
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
    pub fn create(dest: &Path, mut header: PocketHeader) -> Result<PocketWriter, FormatError> {
        let io = |e| FormatError::io(dest, e);
        let mut offset = 0u64;
        let overflow = || FormatError::Invalid {
            path: dest.to_path_buf(),
            reason: "model too large".into(),
        };
        for b in &mut header.blobs {
            b.offset = offset;
            b.xxh3 = PLACEHOLDER.into();
            offset =
                align_up(offset.checked_add(b.size).ok_or_else(overflow)?).ok_or_else(overflow)?;
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
            offset =
                align_up(offset.checked_add(t.size).ok_or_else(overflow)?).ok_or_else(overflow)?;
        }
        let json = serde_json::to_vec(&header).map_err(|e| FormatError::Invalid {
            path: dest.to_path_buf(),
            reason: format!("cannot serialise header: {e}"),
        })?;
        // Slack for what is filled in while writing (provenance sizes and hashes).
        let data_start =
            align_up((PREFIX_LEN + json.len() + HEADER_SLACK) as u64).ok_or_else(overflow)?;

        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = dest.file_name().ok_or_else(|| FormatError::Invalid {
            path: dest.to_path_buf(),
            reason: "output path has no file name".into(),
        })?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let mut file = File::create(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
        let mut w = PocketWriter {
            file: None,
            tmp,
            dest: dest.to_path_buf(),
            header,
            data_start,
            next: 0,
            pos: 0,
        };
        // From here on, dropping `w` removes the temporary file.
        write_prefix(&mut file, &json, data_start).map_err(io)?;
        if data_start > u32::MAX as u64 {
            return Err(overflow());
        }
        let pad = data_start as usize - PREFIX_LEN - json.len();
        file.write_all(&vec![0u8; pad]).map_err(io)?;
        w.file = Some(file);
        Ok(w)
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
        let file = self.file.as_mut().expect("open until finish");
        let io = |e| FormatError::io(&self.tmp, e);
        file.write_all(&vec![0u8; (offset - self.pos) as usize])
            .map_err(io)?;
        file.write_all(bytes).map_err(io)?;
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
        let mut file = self.file.take().expect("open until finish");
        let tmp = self.tmp.clone();
        let io = |e| FormatError::io(&tmp, e);
        // Pad the end so the last item is followed by alignment, like every other.
        let end = align_up(self.pos).unwrap_or(self.pos);
        file.write_all(&vec![0u8; (end - self.pos) as usize])
            .map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        write_prefix(&mut file, &json, self.data_start).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| FormatError::io(&self.dest, e))?;
        if let Some(dir) = self.dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Make the rename itself durable; failure here does not undo a complete file.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        self.tmp = PathBuf::new();
        Ok(self.header.clone())
    }

    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }
}

fn write_prefix(file: &mut File, json: &[u8], data_start: u64) -> std::io::Result<()> {
    let mut prefix = Vec::with_capacity(PREFIX_LEN);
    prefix.extend_from_slice(MAGIC);
    prefix.extend_from_slice(&VERSION.to_le_bytes());
    prefix.extend_from_slice(&(data_start as u32).to_le_bytes());
    prefix.extend_from_slice(&(json.len() as u64).to_le_bytes());
    prefix.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(json).to_le_bytes());
    debug_assert_eq!(prefix.len(), PREFIX_LEN);
    file.write_all(&prefix)?;
    file.write_all(json)
}

impl Drop for PocketWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

const _: () = assert!(ALIGN.is_power_of_two());
