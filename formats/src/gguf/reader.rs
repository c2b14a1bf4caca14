//! GGUF reader. Every count, length, dimension and offset read from the file is checked
//! against the bytes that remain (or the file size) before anything is allocated from it, with
//! checked arithmetic: a crafted file gets a clear error naming the byte offset, never a panic
//! or an allocation proportional to a count it claims.

use super::ggml::GgmlType;
use crate::bytes::ByteView;
use crate::FormatError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
/// Arrays of arrays deeper than this are refused (GGUF files use one level).
const MAX_DEPTH: usize = 4;
const MAX_DIMS: u32 = 4;

#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A short rendering for `inspect` (arrays are summarised).
    pub fn summary(&self) -> String {
        match self {
            GgufValue::Str(s) if s.len() > 80 => {
                format!("{:?}… ({} bytes)", &s[..s.floor_char_boundary(80)], s.len())
            }
            GgufValue::Str(s) => format!("{s:?}"),
            GgufValue::Array(a) => format!("[{} items]", a.len()),
            GgufValue::F32(v) => v.to_string(),
            GgufValue::F64(v) => v.to_string(),
            GgufValue::Bool(b) => b.to_string(),
            other => other
                .as_u64()
                .map(|v| v.to_string())
                .unwrap_or_else(|| format!("{other:?}")),
        }
    }
}

#[derive(Clone, Debug)]
pub struct GgufTensor {
    pub name: String,
    /// GGUF dimension order: `dims[0]` is the row length (columns).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub data: ByteView,
}

impl GgufTensor {
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }

    /// `[rows, cols]` in row-major terms (`cols` = dims[0]); vectors are one row.
    pub fn matrix_shape(&self) -> (usize, usize) {
        let cols = self.dims.first().copied().unwrap_or(1) as usize;
        (self.numel() as usize / cols.max(1), cols)
    }
}

pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensor>,
    index: BTreeMap<String, usize>,
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    path: &'a Path,
    /// Array elements read so far, against [`MAX_ELEMENTS`].
    elements: u64,
}

/// Array elements in all metadata together. Each becomes a 32-byte value in memory, so a file
/// of one-byte elements would otherwise ask for 32× its size; real files (a 262K vocabulary,
/// its scores, types and merges) hold about 1.3 M.
const MAX_ELEMENTS: u64 = 1 << 23;

impl<'a> Cursor<'a> {
    fn err(&self, what: String) -> FormatError {
        FormatError::Invalid {
            path: self.path.to_path_buf(),
            reason: format!("{what} (at byte {})", self.pos),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FormatError> {
        if n > self.b.len() - self.pos {
            return Err(self.err(format!(
                "{what} needs {n} bytes but the file ends (truncated?)"
            )));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    fn remaining(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }

    fn string(&mut self, what: &str) -> Result<String, FormatError> {
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(self.err(format!(
                "{what}: string length {len} is longer than the rest of the file"
            )));
        }
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.err(format!("{what}: not valid UTF-8")))
    }

    fn value(&mut self, ty: u32, depth: usize, key: &str) -> Result<GgufValue, FormatError> {
        Ok(match ty {
            0 => GgufValue::U8(self.take(1, key)?[0]),
            1 => GgufValue::I8(self.take(1, key)?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(
                self.take(2, key)?.try_into().expect("2"),
            )),
            3 => GgufValue::I16(i16::from_le_bytes(
                self.take(2, key)?.try_into().expect("2"),
            )),
            4 => GgufValue::U32(self.u32(key)?),
            5 => GgufValue::I32(self.u32(key)? as i32),
            6 => GgufValue::F32(f32::from_bits(self.u32(key)?)),
            7 => match self.take(1, key)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(self.err(format!("{key}: bool byte {b} is not 0 or 1"))),
            },
            8 => GgufValue::Str(self.string(key)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(self.err(format!("{key}: arrays nested deeper than {MAX_DEPTH}")));
                }
                let inner = self.u32(key)?;
                let count = self.u64(key)?;
                // Every element takes at least one byte (a string at least 8): a count larger
                // than the rest of the file is refused before any allocation.
                let min = match inner {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8..=12 => 8,
                    t => return Err(self.err(format!("{key}: unknown array element type {t}"))),
                };
                if count.checked_mul(min).is_none_or(|n| n > self.remaining()) {
                    return Err(self.err(format!(
                        "{key}: array of {count} elements is larger than the rest of the file"
                    )));
                }
                self.elements = self.elements.saturating_add(count);
                if self.elements > MAX_ELEMENTS {
                    return Err(self.err(format!(
                        "{key}: metadata arrays hold more than {MAX_ELEMENTS} elements in all"
                    )));
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(inner, depth + 1, key)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::U64(self.u64(key)?),
            11 => GgufValue::I64(self.u64(key)? as i64),
            12 => GgufValue::F64(f64::from_bits(self.u64(key)?)),
            t => return Err(self.err(format!("{key}: unknown value type {t}"))),
        })
    }
}

impl GgufFile {
    pub fn sniff(path: &Path) -> bool {
        use std::io::Read;
        let mut m = [0u8; 4];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut m))
            .is_ok()
            && &m == MAGIC
    }

    pub fn open(path: &Path) -> Result<GgufFile, FormatError> {
        let file = ByteView::map_file(path)?;
        let bytes = file.as_slice();
        let mut c = Cursor {
            b: bytes,
            pos: 0,
            path,
            elements: 0,
        };
        if c.take(4, "magic")? != MAGIC {
            return Err(c.err("not a GGUF file (bad magic)".into()));
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(c.err(format!("GGUF version {version} is not supported (2 or 3)")));
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        // A key-value pair takes at least 12 bytes, a tensor info at least 24.
        if n_kv.checked_mul(12).is_none_or(|n| n > c.remaining())
            || n_tensors.checked_mul(24).is_none_or(|n| n > c.remaining())
        {
            return Err(c.err(format!(
                "{n_kv} metadata entries and {n_tensors} tensors cannot fit in the file"
            )));
        }
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string("metadata key")?;
            let ty = c.u32(&key)?;
            let v = c.value(ty, 0, &key)?;
            metadata.insert(key, v);
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= 1 << 16 => a,
                _ => {
                    return Err(c.err(format!(
                        "general.alignment {} is not a power of two",
                        v.summary()
                    )))
                }
            },
        };
        let mut infos = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = c.string("tensor name")?;
            let n_dims = c.u32(&name)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(c.err(format!(
                    "tensor `{name}`: {n_dims} dimensions (1 to {MAX_DIMS} supported)"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64(&name)?);
            }
            let ty_id = c.u32(&name)?;
            let offset = c.u64(&name)?;
            let ty = GgmlType::from_id(ty_id).ok_or_else(|| {
                c.err(format!(
                    "tensor `{name}`: ggml type {ty_id} is not supported"
                ))
            })?;
            infos.push((name, dims, ty, offset));
        }
        let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
        let size = bytes.len() as u64;
        let mut tensors = Vec::with_capacity(infos.len());
        let mut index = BTreeMap::new();
        for (name, dims, ty, offset) in infos {
            let bad = |reason: String| FormatError::BadTensor {
                path: path.to_path_buf(),
                name: name.clone(),
                reason,
            };
            let numel = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&n| n > 0);
            let Some(numel) = numel else {
                return Err(bad(format!("dimensions {dims:?} are zero or overflow")));
            };
            if dims[0] % ty.block().0 as u64 != 0 {
                return Err(bad(format!(
                    "row length {} is not a multiple of the {} block",
                    dims[0],
                    ty.name()
                )));
            }
            let nbytes = ty.bytes_for(numel).ok_or_else(|| {
                bad(format!(
                    "{} elements do not fill whole {} blocks",
                    numel,
                    ty.name()
                ))
            })?;
            if offset % alignment != 0 {
                return Err(bad(format!(
                    "offset {offset} is not {alignment}-byte aligned"
                )));
            }
            let start = data_start.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(nbytes));
            match (start, end) {
                (Some(s), Some(e)) if e <= size => {
                    let data = file.slice(s as usize, nbytes as usize).expect("range checked");
                    if index.insert(name.clone(), tensors.len()).is_some() {
                        return Err(bad("appears twice".into()));
                    }
                    tensors.push(GgufTensor { name, dims, ty, data });
                }
                _ => return Err(bad(format!("data at {offset}+{nbytes} runs past the end of the {size}-byte file (truncated?)"))),
            }
        }
        crate::bytes::check_disjoint(
            path,
            tensors
                .iter()
                .map(|t| (t.name.as_str(), t.data.start() as u64, t.data.len() as u64)),
        )?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
            index,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(GgufValue::as_str)
    }
}
