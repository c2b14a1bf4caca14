//! Weight matrices by storage type. The model code only calls [`Matrix::matvec`] and
//! [`Matrix::row`]; which kernel runs is decided here by the storage kind, so quantized and
//! SIMD storage slot in as new variants without touching the forward pass.

use crate::Error;
use pocket_formats::hf::{DType, MappedTensor};
use rayon::prelude::*;

/// Where a matrix's values live and how they are encoded.
pub enum Storage {
    /// Little-endian f32 inside a memory-mapped file (alignment not guaranteed, so values are
    /// decoded from bytes).
    F32(MappedTensor),
    /// IEEE half precision, memory-mapped.
    F16(MappedTensor),
    /// bfloat16, memory-mapped: widening is a 16-bit shift.
    BF16(MappedTensor),
}

/// A row-major `[rows, cols]` matrix; `rows` is the output dimension of a linear layer.
pub struct Matrix {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    storage: Storage,
}

/// Rows per parallel task: big enough to amortise scheduling, small enough to balance 2 cores.
const ROWS_PER_TASK: usize = 32;

impl Matrix {
    /// Wraps a checkpoint tensor, checking its shape is `[rows, cols]`.
    pub fn from_tensor(t: &MappedTensor, rows: usize, cols: usize) -> Result<Matrix, Error> {
        if t.shape != [rows, cols] {
            return Err(Error::Invalid(format!(
                "tensor `{}` has shape {:?}, expected [{rows}, {cols}]",
                t.name, t.shape
            )));
        }
        let storage = match t.dtype {
            DType::F32 => Storage::F32(t.clone()),
            DType::F16 => Storage::F16(t.clone()),
            DType::BF16 => Storage::BF16(t.clone()),
            DType::Other(ref d) => {
                return Err(Error::Unsupported(format!(
                    "tensor `{}` has dtype {d}; weights must be F32, F16 or BF16",
                    t.name
                )))
            }
        };
        Ok(Matrix {
            name: t.name.clone(),
            rows,
            cols,
            storage,
        })
    }

    pub fn storage_name(&self) -> &'static str {
        match self.storage {
            Storage::F32(_) => "F32",
            Storage::F16(_) => "F16",
            Storage::BF16(_) => "BF16",
        }
    }

    /// Byte range of row `r` for `elem`-byte elements.
    fn row_bytes(&self, r: usize, elem: usize) -> std::ops::Range<usize> {
        let start = r * self.cols * elem;
        start..start + self.cols * elem
    }

    /// Row `r` widened to f32 (an embedding lookup).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols);
        match &self.storage {
            Storage::F32(t) => decode_f32(&t.bytes()[self.row_bytes(r, 4)], out),
            Storage::F16(t) => decode_f16(&t.bytes()[self.row_bytes(r, 2)], out),
            Storage::BF16(t) => decode_bf16(&t.bytes()[self.row_bytes(r, 2)], out),
        }
    }

    /// `y = W x`, rows split across the thread pool.
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) {
        assert!(x.len() == self.cols && y.len() == self.rows);
        y.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(chunk, ys)| {
                let first = chunk * ROWS_PER_TASK;
                let mut row = vec![0.0f32; self.cols];
                for (i, yi) in ys.iter_mut().enumerate() {
                    *yi = self.row_dot(first + i, x, &mut row);
                }
            });
    }

    fn row_dot(&self, r: usize, x: &[f32], scratch: &mut [f32]) -> f32 {
        self.row(r, scratch);
        crate::ops::dot(scratch, x)
    }
}

fn decode_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

fn decode_f16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

fn decode_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
    }
}

/// A small vector (norm weight, bias) read fully into memory, with its length checked.
pub fn load_vector(t: &MappedTensor, len: usize) -> Result<Vec<f32>, Error> {
    if t.shape != [len] {
        return Err(Error::Invalid(format!(
            "tensor `{}` has shape {:?}, expected [{len}]",
            t.name, t.shape
        )));
    }
    t.to_f32_vec().ok_or_else(|| {
        Error::Unsupported(format!(
            "tensor `{}` has dtype {}; expected F32, F16 or BF16",
            t.name,
            t.dtype.name()
        ))
    })
}
