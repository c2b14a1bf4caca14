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

    /// Where this view starts inside its file.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Tells the kernel this process no longer needs the view's pages (its bytes were
    /// copied elsewhere), so they leave the resident set; a later read maps them in again.
    pub fn release(&self) {
        #[cfg(unix)]
        {
            // SAFETY: the map is a read-only, never-written file mapping: dropping its pages
            // loses nothing (they are re-read from the file if touched again), and the range
            // lies inside the map.
            // The range must start on a page: take the whole 64 KiB units inside the view (a
            // multiple of every page size in use), or madvise refuses the whole call.
            const UNIT: usize = 64 << 10;
            let (start, end) = (
                self.start.next_multiple_of(UNIT),
                (self.start + self.len) / UNIT * UNIT,
            );
            if end <= start {
                return;
            }
            let _ = unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start,
                    end - start,
                )
            };
        }
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

/// Refuses tensors whose byte ranges `(name, start, len)` overlap: a crafted file could alias
/// one tensor's bytes as another's (and a flipped byte would then damage both).
pub fn check_disjoint<'a>(
    path: &std::path::Path,
    ranges: impl Iterator<Item = (&'a str, u64, u64)>,
) -> Result<(), FormatError> {
    let mut r: Vec<_> = ranges.filter(|x| x.2 > 0).collect();
    r.sort_by_key(|x| (x.1, x.2));
    for w in r.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.1 + a.2 > b.1 {
            return Err(FormatError::BadTensor {
                path: path.to_path_buf(),
                name: b.0.to_string(),
                reason: format!(
                    "its bytes {}..{} overlap those of `{}` ({}..{})",
                    b.1,
                    b.1 + b.2,
                    a.0,
                    a.1,
                    a.1 + a.2
                ),
            });
        }
    }
    Ok(())
}
