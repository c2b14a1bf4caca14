//! A cheap, cloneable view of bytes inside a read-only memory map, so tensors can be handed to
//! the engine without copying and without lifetimes tying them to their file.

use crate::FormatError;
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

#[derive(Clone)]
pub struct ByteView {
    map: Arc<Mmap>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for ByteView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ByteView({} bytes at {})", self.len, self.start)
    }
}

impl ByteView {
    /// Maps a whole file read-only.
    pub fn map_file(path: &Path) -> Result<ByteView, FormatError> {
        let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
        // SAFETY: the file is opened read-only and mapped read-only. pocket never writes to
        // model files it reads; like every mmap-based loader we rely on other processes not
        // truncating the file while it is mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))?;
        let len = map.len();
        Ok(ByteView {
            map: Arc::new(map),
            start: 0,
            len,
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A sub-view; `None` if the range is not inside this view.
    pub fn slice(&self, start: usize, len: usize) -> Option<ByteView> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| ByteView {
            map: self.map.clone(),
            start: self.start + start,
            len,
        })
    }
}
