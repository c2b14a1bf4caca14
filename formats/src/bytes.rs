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
    /// A copy of `bytes` in anonymous read-only memory: computed weights (an adapter's new
    /// output head) go where the engine reads mapped ones.
    pub fn from_bytes(bytes: &[u8]) -> std::io::Result<ByteView> {
        let mut map = memmap2::MmapMut::map_anon(bytes.len().max(1))?;
        map[..bytes.len()].copy_from_slice(bytes);
        Ok(ByteView {
            map: Arc::new(map.make_read_only()?),
            start: 0,
            len: bytes.len(),
        })
    }

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

/// Zeroed, writable memory for the packed copies of weights (a GGUF repacked for the kernels
/// at load), carved from chunks of anonymous memory that ask for transparent huge pages. A
/// decode step streams every weight byte; on 4 KiB pages it takes a TLB miss and a cold
/// prefetcher at every page, and the layer matrices (0.1–3 MB each) are too small to get huge
/// pages one by one: from shared 32 MiB chunks they do (measured on the MNN-Pocket shape's
/// Q4_0 GGUF: decode 130 → 157 tok/s). Pieces start on 64-byte boundaries (a `Vec`'s 16-byte
/// alignment would split every vector load across two cache lines). Where the kernel gives no
/// huge pages (THP off, other systems) it is ordinary page-aligned memory.
pub struct ArenaBytes {
    chunk: Arc<Chunk>,
    start: usize,
    len: usize,
}

struct Chunk {
    /// Kept for its lifetime (unmapped on drop); written only through `ptr`.
    _map: memmap2::MmapMut,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a chunk is plain memory; every byte of it belongs to at most one `ArenaBytes`, which
// reads and writes its own range only, through `&self` / `&mut self` (see below).
unsafe impl Send for Chunk {}
// SAFETY: as above; shared references to a chunk never touch its bytes.
unsafe impl Sync for Chunk {}

/// Bytes per chunk; a larger piece gets a chunk of its own.
const CHUNK: usize = 32 << 20;
/// Pieces start at multiples of this.
const ALIGN: usize = 64;

static OPEN: std::sync::Mutex<Option<(Arc<Chunk>, usize)>> = std::sync::Mutex::new(None);

impl ArenaBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> std::io::Result<ArenaBytes> {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((chunk, used)) = open.as_mut() {
            let start = used.next_multiple_of(ALIGN);
            if start + len <= chunk.len {
                *used = start + len;
                return Ok(ArenaBytes {
                    chunk: chunk.clone(),
                    start,
                    len,
                });
            }
        }
        let size = len.max(CHUNK).next_multiple_of(2 << 20);
        let mut map = memmap2::MmapMut::map_anon(size)?;
        #[cfg(target_os = "linux")]
        {
            // Advice only: ignored where THP is off.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        let chunk = Arc::new(Chunk {
            ptr: map.as_mut_ptr(),
            _map: map,
            len: size,
        });
        // A piece that fills most of a chunk keeps it; the open chunk stays open otherwise.
        if size - len >= CHUNK / 4 || open.is_none() {
            *open = Some((chunk.clone(), len));
        }
        Ok(ArenaBytes {
            chunk,
            start: 0,
            len,
        })
    }
}

impl std::ops::Deref for ArenaBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `start..start + len` lies inside the chunk's mapping (checked when handed
        // out), which lives as long as `self.chunk`; no other `ArenaBytes` covers these bytes,
        // and they are written only through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.add(self.start), self.len) }
    }
}

impl std::ops::DerefMut for ArenaBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference to the range.
        unsafe { std::slice::from_raw_parts_mut(self.chunk.ptr.add(self.start), self.len) }
    }
}
