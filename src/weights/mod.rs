//! Weight matrices by storage type. The model code only calls [`Matrix::matvec`] and
//! [`Matrix::row`]; which kernel runs is decided here by the storage kind, so new storage
//! types and SIMD kernels slot in without touching the forward pass.
//!
//! - this file: [`Matrix`], its storage forms and the kernel each form takes;
//! - `matmul.rs`: mat-vec and batched products, scheduled on the worker pool or rayon;
//! - `bands.rs`: how rows and tokens are split across threads;
//! - `ggml.rs`: a GGUF's quantized types carried into the packed layouts, losslessly;

mod bands;
mod ggml;
mod matmul;

use crate::config::{Activations, Cpu, EngineConfig, Isa};
use crate::kernels::act::QuantActs;
use crate::kernels::dense::{DenseKind, DenseMatrix};
use crate::kernels::q4_packed::{self, PackedQ4};
use crate::kernels::q8_packed::{self, PackedQ8};
use crate::kernels::{self, q4::Q4Matrix, q8::Q8Matrix};
use crate::Error;
use pocket_formats::bytes::ByteView;
use pocket_formats::gguf::GgmlType;
use pocket_formats::pocket::Layout;
use pocket_formats::quant::QuantType;
use pocket_formats::stored::{decode_row, StoredTensor};
use std::sync::Arc;

pub use pocket_formats::stored::Encoding;

/// A row-major `[rows, cols]` matrix; `rows` is the output dimension of a linear layer.
pub struct Matrix {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub encoding: Encoding,
    data: ByteView,
    /// Stored row of each logical row, when the file orders rows differently (llama.cpp's
    /// q/k layout for `llama`).
    row_map: Option<Arc<[u32]>>,
    /// Q4 and Q8 weights repacked 16 rows at a time for the SIMD kernels (see
    /// `kernels::q4_packed`); when present, every read of the matrix goes through it.
    packed: Option<Packed>,
    /// The kernels and activation precision this matrix runs with (the model's).
    config: EngineConfig,
}

/// A matrix repacked for the SIMD kernels.
enum Packed {
    Q4(PackedQ4),
    Q8(PackedQ8),
}

impl Matrix {
    /// Wraps stored bytes, checking that their length fits `dtype` and the shape.
    pub fn new(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: QuantType,
        data: ByteView,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        match dtype.byte_size(rows, cols) {
            Some(n) if n == data.len() => {
                let simd = config.cpu.simd();
                let packed = match dtype {
                    QuantType::Q4 { block, sym } if simd => {
                        let w = Q4Matrix::from_bytes(data.as_slice(), rows, cols, block, sym);
                        PackedQ4::pack(&w).map(Packed::Q4)
                    }
                    QuantType::Q8 { block } if simd => {
                        let (codes, scales) = data.as_slice().split_at(rows * cols);
                        PackedQ8::pack(&Q8Matrix {
                            codes,
                            scales,
                            rows,
                            cols,
                            block,
                        })
                        .map(Packed::Q8)
                    }
                    _ => None,
                };
                if packed.is_some() {
                    // The packed copy replaces the mapped bytes: hand their pages back.
                    data.release();
                }
                Ok(Matrix::stored(
                    name, rows, cols, dtype, data, packed, config,
                ))
            }
            _ => Err(Error::Invalid(format!(
                "tensor `{name}`: {} bytes do not hold a [{rows}, {cols}] {dtype} matrix",
                data.len()
            ))),
        }
    }

    /// A matrix from a file's stored tensor ([`ModelFile::stored`](pocket_formats::model_file::ModelFile::stored)), checked against the
    /// shape the model expects: every format goes through here.
    pub fn from_stored(
        st: StoredTensor,
        rows: usize,
        cols: usize,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        st.expect_shape(&[rows, cols])?;
        match st.encoding {
            Encoding::Pocket(q) if st.row_map.is_none() => {
                Matrix::from_pocket(&st.name, rows, cols, q, st.layout, st.bytes, config)
            }
            Encoding::Pocket(q) => Err(Error::Invalid(format!(
                "tensor `{}`: a reordered {q} matrix is not supported",
                st.name
            ))),
            Encoding::Ggml(t) => {
                Matrix::ggml(&st.name, rows, cols, t, st.bytes, st.row_map, config)
            }
        }
    }

    /// A `.pocket` matrix: row-major bytes go through [`Matrix::new`]; Q4/Q8 bytes stored in the
    /// kernels' `rows16` layout are used where they are mapped (every ISA reads that layout;
    /// the scalar path through the packed kernels' twins).
    pub fn from_pocket(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: QuantType,
        layout: Layout,
        data: ByteView,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        if layout == Layout::Rows {
            return Matrix::new(name, rows, cols, dtype, data, config);
        }
        let packed = match dtype {
            QuantType::Q4 { block, sym } => {
                PackedQ4::mapped(data.clone(), rows, cols, block, sym).map(Packed::Q4)
            }
            QuantType::Q8 { block } => {
                PackedQ8::mapped(data.clone(), rows, cols, block).map(Packed::Q8)
            }
            _ => None,
        };
        let Some(packed) = packed else {
            return Err(Error::Invalid(format!(
                "tensor `{name}`: {} bytes in layout rows16 do not hold a [{rows}, {cols}] {dtype} matrix",
                data.len()
            )));
        };
        // `data` holds the same bytes in the packed order: every read goes through `packed`.
        Ok(Matrix::stored(
            name,
            rows,
            cols,
            dtype,
            data,
            Some(packed),
            config,
        ))
    }

    fn stored(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: QuantType,
        data: ByteView,
        packed: Option<Packed>,
        config: EngineConfig,
    ) -> Matrix {
        Matrix {
            name: name.into(),
            rows,
            cols,
            encoding: Encoding::Pocket(dtype),
            data,
            row_map: None,
            packed,
            config,
        }
    }

    /// A matrix of ggml blocks; `row_map[r]` is the stored row holding logical row `r`.
    pub fn ggml(
        name: &str,
        rows: usize,
        cols: usize,
        ty: GgmlType,
        data: ByteView,
        row_map: Option<Vec<u32>>,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        let ok = Encoding::Ggml(ty).byte_size(rows, cols) == Some(data.len())
            && row_map
                .as_ref()
                .is_none_or(|m| m.len() == rows && m.iter().all(|&r| (r as usize) < rows));
        if !ok {
            return Err(Error::Invalid(format!(
                "tensor `{name}`: {} bytes do not hold a [{rows}, {cols}] {} matrix",
                data.len(),
                ty.name()
            )));
        }
        // Quantized types go into the packed layouts (rows in logical order), losslessly.
        let packed = ggml::pack(ty, rows, cols, data.as_slice(), row_map.as_deref());
        if packed.is_some() {
            // The packed copy replaces the mapped bytes: hand their pages back.
            data.release();
        }
        Ok(Matrix {
            name: name.into(),
            rows,
            cols,
            encoding: Encoding::Ggml(ty),
            data,
            row_map: if packed.is_some() {
                None
            } else {
                row_map.map(Into::into)
            },
            packed,
            config,
        })
    }

    /// A short name of the storage type, for reports.
    pub fn type_name(&self) -> String {
        self.encoding.name()
    }

    /// Row `r` decoded to f32 (an embedding lookup; also the reference matvec's inner step).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols);
        match &self.packed {
            Some(Packed::Q4(p)) => return p.row(r, out),
            Some(Packed::Q8(p)) => return p.row(r, out),
            None => {}
        }
        let r = self.row_map.as_ref().map_or(r, |m| m[r] as usize);
        decode_row(
            self.encoding,
            self.data.as_slice(),
            self.rows,
            self.cols,
            r,
            out,
        )
    }

    /// The SIMD view of an f32/f16/bf16 matrix, on CPUs with a dense kernel (AVX-512, NEON;
    /// AVX2 keeps the decode-then-tile path, whose AVX2 tile is faster than the scalar twin).
    fn dense_kernel(&self) -> Option<DenseMatrix<'_>> {
        let cpu = self.config.cpu;
        if !(cpu.has(Isa::Avx512) || cpu.has(Isa::Neon)) || self.row_map.is_some() {
            return None;
        }
        let kind = match self.encoding {
            Encoding::Pocket(QuantType::F32) | Encoding::Ggml(GgmlType::F32) => DenseKind::F32,
            Encoding::Pocket(QuantType::F16) | Encoding::Ggml(GgmlType::F16) => DenseKind::F16,
            Encoding::Pocket(QuantType::BF16) | Encoding::Ggml(GgmlType::BF16) => DenseKind::BF16,
            _ => return None,
        };
        Some(DenseMatrix {
            bytes: self.data.as_slice(),
            rows: self.rows,
            cols: self.cols,
            kind,
        })
    }

    /// Whether a row of a multi-row product comes out the same in any batch of two rows or
    /// more. Only the W4A16 kernels' narrow tiles (one or two tokens) keep extra f32 partial
    /// sums and so round differently; the integer, dense and f32 paths sum each row in one
    /// order (tests/engine/batch_generation.rs checks every storage type).
    pub(crate) fn rows_batch_independent(&self) -> bool {
        self.w4a16_kernel().is_none()
    }

    /// The packed Q4 matrix, when activations stay in f32 (W4A16 kernels).
    fn w4a16_kernel(&self) -> Option<&PackedQ4> {
        match &self.packed {
            Some(Packed::Q4(p)) if self.config.activations == Activations::F32 => Some(p),
            _ => None,
        }
    }

    /// The W8A16 view of a packed Q8 matrix, when activations are f32.
    fn w8a16_kernel(&self) -> Option<&PackedQ8> {
        match &self.packed {
            Some(Packed::Q8(p)) if self.config.activations == Activations::F32 => Some(p),
            _ => None,
        }
    }

    /// Whether its kernels quantize the activations to int8 (a quantized matrix on the default
    /// path): a layer whose own weights are quantized, beside which an adapter can round to
    /// f16 for free ([`crate::lora::Factor`]).
    pub fn quantizes_activations(&self) -> bool {
        self.int8_kernel().is_some()
    }

    /// The integer kernel view of a Q4 or Q8 matrix, when activations are int8 (one digit or
    /// two).
    fn int8_kernel(&self) -> Option<IntKernel<'_>> {
        if self.config.activations.digits() == 0 || self.row_map.is_some() {
            return None;
        }
        match &self.packed {
            Some(Packed::Q4(p)) => return Some(IntKernel::Q4Packed(p)),
            Some(Packed::Q8(p)) => return Some(IntKernel::Q8Packed(p)),
            None => {}
        }
        let b = self.data.as_slice();
        let (rows, cols) = (self.rows, self.cols);
        match self.encoding {
            Encoding::Pocket(QuantType::Q4 { block, sym }) => Some(IntKernel::Q4(
                Q4Matrix::from_bytes(b, rows, cols, block, sym),
            )),
            Encoding::Pocket(QuantType::Q8 { block }) => {
                let (codes, scales) = b.split_at(rows * cols);
                Some(IntKernel::Q8(Q8Matrix {
                    codes,
                    scales,
                    rows,
                    cols,
                    block,
                }))
            }
            _ => None,
        }
    }

    /// Int8 digits per activation on the integer kernels: 2 with `Activations::Int8x2`
    /// (the residual too).
    pub(crate) fn act_digits(&self) -> usize {
        self.config.activations.digits()
    }

    /// The kernels' instruction set for this matrix.
    pub fn cpu(&self) -> Cpu {
        self.config.cpu
    }

    /// Bytes of the weights as the kernels read them.
    pub fn stored_bytes(&self) -> usize {
        match &self.packed {
            Some(Packed::Q4(p)) => p.data.len(),
            Some(Packed::Q8(p)) => p.data.len(),
            None => self.data.len(),
        }
    }
}

thread_local! {
    /// The per-digit products of [`IntKernel::dot_rows_tokens`] before they are summed.
    static DIGIT_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A quantized matrix in the form the int8 kernels take.
pub(super) enum IntKernel<'a> {
    Q4(Q4Matrix<'a>),
    Q4Packed(&'a PackedQ4),
    Q8(Q8Matrix<'a>),
    Q8Packed(&'a PackedQ8),
}

impl IntKernel<'_> {
    fn block(&self) -> usize {
        match self {
            IntKernel::Q4(m) => m.block,
            IntKernel::Q4Packed(p) => p.block,
            IntKernel::Q8(m) => m.block,
            IntKernel::Q8Packed(p) => p.block,
        }
    }

    fn chunk(&self, cpu: Cpu) -> usize {
        match self {
            IntKernel::Q4(_) => kernels::q4::act_chunk(cpu),
            IntKernel::Q4Packed(_) => q4_packed::ACT_CHUNK,
            IntKernel::Q8(_) | IntKernel::Q8Packed(_) => 0,
        }
    }

    /// Row bands must start and end on multiples of this.
    fn align(&self) -> usize {
        match self {
            IntKernel::Q4Packed(_) | IntKernel::Q8Packed(_) => q4_packed::GROUP,
            _ => 1,
        }
    }

    /// One token against rows `first..first + y.len()`: `a` holds its activation digits
    /// ([`QuantActs::digits`]).
    fn dot_rows(&self, cpu: Cpu, first: usize, a: &[QuantActs], y: &mut [f32]) {
        if a.len() > 1 {
            return self.dot_rows_tokens(cpu, first, y.len(), a, y, a.len());
        }
        let a = &a[0];
        match self {
            IntKernel::Q4(m) => kernels::q4::dot_rows(cpu, m, first, a, y),
            IntKernel::Q4Packed(p) => {
                q4_packed::dot_rows_tokens(cpu, p, first, y.len(), std::slice::from_ref(a), y)
            }
            IntKernel::Q8(m) => kernels::q8::dot_rows(cpu, m, first, a, y),
            IntKernel::Q8Packed(p) => {
                q8_packed::dot_rows_tokens(cpu, p, first, y.len(), std::slice::from_ref(a), y)
            }
        }
    }

    /// Tokens against rows `first..first + count`: `acts` holds `digits` entries per token
    /// (its activation and, with two digits, the residual's), and each token's outputs are
    /// the sum of its digits' products.
    fn dot_rows_tokens(
        &self,
        cpu: Cpu,
        first: usize,
        count: usize,
        acts: &[QuantActs],
        out: &mut [f32],
        digits: usize,
    ) {
        if digits == 1 {
            return self.dot_rows_tokens_raw(cpu, first, count, acts, out);
        }
        DIGIT_SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            s.clear();
            s.resize(acts.len() * count, 0.0);
            self.dot_rows_tokens_raw(cpu, first, count, acts, &mut s);
            for (t, o) in out.chunks_exact_mut(count).enumerate() {
                let parts = &s[t * digits * count..(t + 1) * digits * count];
                o.copy_from_slice(&parts[..count]);
                for d in 1..digits {
                    for (o, v) in o.iter_mut().zip(&parts[d * count..(d + 1) * count]) {
                        *o += v;
                    }
                }
            }
            // A long prefill's scratch (tokens × digits × rows) is not kept for decode.
            if s.capacity() > 1 << 20 {
                *s = Vec::new();
            }
        })
    }

    fn dot_rows_tokens_raw(
        &self,
        cpu: Cpu,
        first: usize,
        count: usize,
        acts: &[QuantActs],
        out: &mut [f32],
    ) {
        match self {
            IntKernel::Q4(m) => kernels::q4::dot_rows_tokens(cpu, m, first, count, acts, out),
            IntKernel::Q4Packed(p) => q4_packed::dot_rows_tokens(cpu, p, first, count, acts, out),
            IntKernel::Q8(m) => kernels::q8::dot_rows_tokens(cpu, m, first, count, acts, out),
            IntKernel::Q8Packed(p) => q8_packed::dot_rows_tokens(cpu, p, first, count, acts, out),
        }
    }
}
