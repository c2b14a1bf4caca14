//! Output that appears whole or not at all: bytes go to a temporary file next to the target
//! (`.NAME.tmp-PID`, same filesystem, so the final rename is atomic), which is fsynced and
//! renamed over the target by [`AtomicFile::commit`]. Dropped uncommitted (an error, a panic),
//! the temporary file is removed.

use crate::FormatError;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub struct AtomicFile {
    out: Option<BufWriter<File>>,
    tmp: PathBuf,
    dest: PathBuf,
}

impl AtomicFile {
    pub fn create(dest: &Path) -> Result<AtomicFile, FormatError> {
        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = dest.file_name().ok_or_else(|| FormatError::Invalid {
            path: dest.to_path_buf(),
            reason: "output path has no file name".into(),
        })?;
        if !dir.is_dir() {
            // Named once as the folder: the caller's message already names the output file.
            return Err(FormatError::Invalid {
                path: dir.to_path_buf(),
                reason: "no such folder for the output (create it first)".into(),
            });
        }
        let prefix = format!(".{}.tmp-", name.to_string_lossy());
        remove_stale(dir, &prefix);
        let tmp = dir.join(format!("{prefix}{}", std::process::id()));
        let file = File::create(&tmp).map_err(|e| FormatError::io(dest, e))?;
        Ok(AtomicFile {
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            tmp,
            dest: dest.to_path_buf(),
        })
    }

    pub fn dest(&self) -> &Path {
        &self.dest
    }

    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    fn out(&mut self) -> &mut BufWriter<File> {
        self.out.as_mut().expect("open until commit")
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), FormatError> {
        let r = self.out().write_all(bytes);
        r.map_err(|e| FormatError::io(&self.dest, e))
    }

    pub fn write_zeros(&mut self, n: usize) -> Result<(), FormatError> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut left = n;
        while left > 0 {
            let k = left.min(ZEROS.len());
            self.write_all(&ZEROS[..k])?;
            left -= k;
        }
        Ok(())
    }

    /// Goes back to the start of the file (to rewrite a header filled in last).
    pub fn rewind(&mut self) -> Result<(), FormatError> {
        let r = self.out().seek(SeekFrom::Start(0));
        r.map(|_| ()).map_err(|e| FormatError::io(&self.dest, e))
    }

    /// Flushes, fsyncs and renames the file into place.
    pub fn commit(mut self) -> Result<(), FormatError> {
        let out = self.out.take().expect("open until commit");
        let file = out
            .into_inner()
            .map_err(|e| FormatError::io(&self.dest, e.into_error()))?;
        file.sync_all()
            .map_err(|e| FormatError::io(&self.dest, e))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| FormatError::io(&self.dest, e))?;
        self.tmp = PathBuf::new();
        if let Some(dir) = self.dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Make the rename itself durable; failing here does not undo a complete file.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            self.out.take();
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes a whole file atomically (reports, dumps, saved chats).
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> Result<(), FormatError> {
    let mut f = AtomicFile::create(dest)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Removes temporary files of this target left by a process that was killed (SIGKILL, power
/// loss): `.NAME.tmp-PID` whose PID is no longer running. Only where `/proc` tells.
fn remove_stale(dir: &Path, prefix: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
