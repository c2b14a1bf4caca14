//! One tensor as a file stores it, named by its Hugging Face name: how its bytes encode its
//! values, in which order, and the fixes a reader applies (a GGUF's llama q/k row order, its
//! Gemma norms stored as `w − 1`). [`crate::model_file::ModelFile::stored`] gives these for
//! every format, so the engine builds its matrices from one description, and every decode of
//! a whole tensor ([`StoredTensor::to_f32`]) is written once.

use crate::bytes::ByteView;
use crate::gguf::{ggml, GgmlType};
use crate::pocket::Layout;
use crate::quant::{dense, q4, q8, rows16, QuantType};
use crate::FormatError;
use std::path::PathBuf;

/// How a tensor's bytes encode its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Our storage types (`.pocket`, and F32/F16/BF16 from safetensors).
    Pocket(QuantType),
    /// ggml block types, as stored in GGUF files.
    Ggml(GgmlType),
}

impl Encoding {
    /// A short name of the storage type, for reports.
    pub fn name(self) -> String {
        match self {
            Encoding::Pocket(q) => q.to_string(),
            Encoding::Ggml(t) => t.name().to_string(),
        }
    }

    /// Bytes of a `[rows, cols]` tensor in this encoding (`None` when the shape does not fit
    /// the blocks or the size overflows).
    pub fn byte_size(self, rows: usize, cols: usize) -> Option<usize> {
        match self {
            Encoding::Pocket(q) => q.byte_size(rows, cols),
            Encoding::Ggml(t) => t
                .bytes_for(cols as u64)
                .and_then(|b| b.checked_mul(rows as u64))
                .and_then(|b| usize::try_from(b).ok()),
        }
    }
}

pub struct StoredTensor {
    /// The Hugging Face name.
    pub name: String,
    /// `[rows, cols]`, or `[len]` for vectors (HF order).
    pub shape: Vec<usize>,
    pub encoding: Encoding,
    /// The byte order (`Rows16`: a `.pocket` matrix interleaved for the kernels).
    pub layout: Layout,
    pub bytes: ByteView,
    /// The stored row of each logical row, when the file orders rows differently (for a
    /// vector: the stored element of each logical element).
    pub row_map: Option<Vec<u32>>,
    /// Added to every value when read (GGUF stores Gemma's norms as `w − 1`).
    pub shift: f32,
    /// The file, for errors.
    pub file: PathBuf,
}

impl StoredTensor {
    /// `(rows, cols)`: a vector is one row.
    pub fn matrix_shape(&self) -> (usize, usize) {
        match self.shape[..] {
            [len] => (1, len),
            [rows, cols] => (rows, cols),
            _ => (0, 0),
        }
    }

    fn bad(&self, reason: String) -> FormatError {
        FormatError::BadTensor {
            path: self.file.clone(),
            name: self.name.clone(),
            reason,
        }
    }

    /// Refuses a shape other than `want`.
    pub fn expect_shape(&self, want: &[usize]) -> Result<(), FormatError> {
        match self.shape == want {
            true => Ok(()),
            false => Err(self.bad(format!("has shape {:?}, expected {want:?}", self.shape))),
        }
    }

    /// Every value in logical row order, as f32 (norm weights, biases, reports, tests).
    pub fn to_f32(&self) -> Result<Vec<f32>, FormatError> {
        let (rows, cols) = self.matrix_shape();
        if self.encoding.byte_size(rows, cols) != Some(self.bytes.len()) {
            return Err(self.bad(format!(
                "{} bytes do not hold a [{rows}, {cols}] {} tensor",
                self.bytes.len(),
                self.encoding.name()
            )));
        }
        let row_major;
        let b = match (self.layout, self.encoding) {
            (Layout::Rows16, Encoding::Pocket(q)) => {
                row_major = rows16::unpack(q, self.bytes.as_slice(), rows, cols)
                    .ok_or_else(|| self.bad("not a rows16 matrix".into()))?;
                &row_major[..]
            }
            _ => self.bytes.as_slice(),
        };
        let mut out = vec![0.0f32; rows * cols];
        let map = self.row_map.as_deref();
        if map.is_some_and(|m| m.len() != self.shape[0] || m.iter().any(|&r| r as usize >= m.len()))
        {
            return Err(self.bad("its row order does not fit its shape".into()));
        }
        for (r, o) in out.chunks_exact_mut(cols.max(1)).enumerate() {
            let src = match (map, self.shape.len()) {
                (Some(m), 2) => m[r] as usize,
                _ => r,
            };
            decode_row(self.encoding, b, rows, cols, src, o);
        }
        if let (Some(m), 1) = (map, self.shape.len()) {
            out = m.iter().map(|&i| out[i as usize]).collect();
        }
        if self.shift != 0.0 {
            out.iter_mut().for_each(|x| *x += self.shift);
        }
        Ok(out)
    }
}

/// Row `r` of a row-major `[rows, cols]` tensor of `bytes` (sizes checked by the caller).
pub fn decode_row(enc: Encoding, b: &[u8], rows: usize, cols: usize, r: usize, out: &mut [f32]) {
    let q = match enc {
        Encoding::Pocket(QuantType::Ggml(t)) | Encoding::Ggml(t) => {
            let row_bytes = t.bytes_for(cols as u64).expect("checked by the caller") as usize;
            return ggml::dequantize(t, &b[r * row_bytes..(r + 1) * row_bytes], out);
        }
        Encoding::Pocket(q) => q,
    };
    match q {
        QuantType::F32 => dense::decode_f32(&b[r * cols * 4..][..cols * 4], out),
        QuantType::F16 => dense::decode_f16(&b[r * cols * 2..][..cols * 2], out),
        QuantType::BF16 => dense::decode_bf16(&b[r * cols * 2..][..cols * 2], out),
        QuantType::Q8 { block } => {
            let (codes, scales) = b.split_at(rows * cols);
            let nb = cols / block;
            q8::dequantize_row(
                &codes[r * cols..][..cols],
                &scales[r * nb * 2..][..nb * 2],
                block,
                out,
            )
        }
        QuantType::Q4 { block, sym } => {
            let (codes, params) = q4::planes(b, rows, cols);
            let pl = cols / block * q4::param_bytes(sym);
            q4::dequantize_row(
                &codes[r * cols / 2..][..cols / 2],
                &params[r * pl..][..pl],
                block,
                sym,
                out,
            )
        }
        QuantType::Ggml(_) => unreachable!("decoded above"),
    }
}
