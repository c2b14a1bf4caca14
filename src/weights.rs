//! Weight matrices by storage type. The model code only calls [`Matrix::matvec`] and
//! [`Matrix::row`]; which kernel runs is decided here by the storage kind, so new storage
//! types and SIMD kernels slot in without touching the forward pass.
//!
//! The kernels here are the scalar reference: decode a row with the codec's own definition
//! (`pocket_formats::quant`), then a dot product.

use crate::kernels::dense::{self as dense_kernel, DenseKind, DenseMatrix};
use crate::kernels::q4_packed::{self, PackedQ4};
use crate::kernels::q8_packed::{self, PackedQ8};
use crate::kernels::{self, act::QuantActs, q4::Q4Matrix, q8::Q8Matrix, Activations, Isa};
use crate::Error;
use pocket_formats::bytes::ByteView;
use pocket_formats::gguf::{ggml, GgmlType, GgufFile};
use pocket_formats::hf::{DType, HfCheckpoint, MappedTensor};
use pocket_formats::pocket::reader::{PocketFile, PocketTensor};
use pocket_formats::pocket::Layout;
use pocket_formats::quant::{dense, q4, q8, QuantType};
use rayon::prelude::*;
use std::sync::Arc;

/// How a matrix's bytes encode its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Our storage types (`.pocket`, and F32/F16/BF16 from safetensors).
    Pocket(QuantType),
    /// ggml block types, as stored in GGUF files.
    Ggml(GgmlType),
}

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
    /// Q4 and Q8 weights repacked 16 rows at a time for the AVX2 and AVX-512 kernels (see
    /// `kernels::q4_packed`); when present, every read of the matrix goes through it.
    packed: Option<Packed>,
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
    ) -> Result<Matrix, Error> {
        match dtype.byte_size(rows, cols) {
            Some(n) if n == data.len() => {
                let isa = kernels::active();
                let packed = match dtype {
                    QuantType::Q4 { block, sym } if isa >= Isa::Avx2 => {
                        let w = Q4Matrix::from_bytes(data.as_slice(), rows, cols, block, sym);
                        PackedQ4::pack(&w).map(Packed::Q4)
                    }
                    QuantType::Q8 { block } if isa >= Isa::Avx2 => {
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
                Ok(Matrix::stored(name, rows, cols, dtype, data, packed))
            }
            _ => Err(Error::Invalid(format!(
                "tensor `{name}`: {} bytes do not hold a [{rows}, {cols}] {dtype} matrix",
                data.len()
            ))),
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
    ) -> Result<Matrix, Error> {
        if layout == Layout::Rows {
            return Matrix::new(name, rows, cols, dtype, data);
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
        Ok(Matrix::stored(name, rows, cols, dtype, data, Some(packed)))
    }

    fn stored(
        name: &str,
        rows: usize,
        cols: usize,
        dtype: QuantType,
        data: ByteView,
        packed: Option<Packed>,
    ) -> Matrix {
        Matrix {
            name: name.into(),
            rows,
            cols,
            encoding: Encoding::Pocket(dtype),
            data,
            row_map: None,
            packed,
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
    ) -> Result<Matrix, Error> {
        let ok = ty
            .bytes_for(cols as u64)
            .and_then(|b| b.checked_mul(rows as u64))
            == Some(data.len() as u64)
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
        Ok(Matrix {
            name: name.into(),
            rows,
            cols,
            encoding: Encoding::Ggml(ty),
            data,
            row_map: row_map.map(Into::into),
            packed: None,
        })
    }

    /// A short name of the storage type, for reports.
    pub fn type_name(&self) -> String {
        match self.encoding {
            Encoding::Pocket(q) => q.to_string(),
            Encoding::Ggml(t) => t.name().to_string(),
        }
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
        let (rows, cols) = (self.rows, self.cols);
        let b = self.data.as_slice();
        let dtype = match self.encoding {
            Encoding::Pocket(q) => q,
            Encoding::Ggml(t) => {
                let row_bytes = t.bytes_for(cols as u64).expect("checked at construction") as usize;
                return ggml::dequantize(t, &b[r * row_bytes..(r + 1) * row_bytes], out);
            }
        };
        match dtype {
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
        }
    }

    /// The SIMD view of an f32/f16/bf16 matrix, on CPUs with the AVX-512 dense kernel (others
    /// keep the decode-then-tile path, whose AVX2 tile is faster than the scalar twin).
    fn dense_kernel(&self) -> Option<DenseMatrix<'_>> {
        if kernels::active() < Isa::Avx512 || self.row_map.is_some() {
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

    /// The packed Q4 matrix, when activations stay in f32 (W4A16 kernels).
    fn w4a16_kernel(&self) -> Option<&PackedQ4> {
        match &self.packed {
            Some(Packed::Q4(p)) if kernels::activations() == Activations::F32 => Some(p),
            _ => None,
        }
    }

    /// The integer kernel view of a Q4 or Q8 matrix, when activations are int8.
    fn int8_kernel(&self) -> Option<IntKernel<'_>> {
        if kernels::activations() != Activations::Int8 || self.row_map.is_some() {
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

    /// `y = W x`, rows split across the thread pool.
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) {
        assert!(x.len() == self.cols && y.len() == self.rows);
        if let Some(k) = self.int8_kernel() {
            let isa = kernels::active();
            let mut a = QuantActs::default();
            a.quantize(x, k.block(), k.chunk(isa));
            par_rows(y, self.cols, k.align(), |first, ys| {
                k.dot_rows(isa, first, &a, ys)
            });
            return;
        }
        if let Some(p) = self.w4a16_kernel() {
            let isa = kernels::active();
            let sums = q4_packed::block_sums(x, p.block);
            return par_rows(y, self.cols, q4_packed::GROUP, |first, ys| {
                q4_packed::dot_rows_f32(isa, p, first, ys.len(), x, &sums, ys)
            });
        }
        if let Some(d) = self.dense_kernel() {
            let isa = kernels::active();
            return par_rows(y, self.cols, 1, |first, ys| {
                dense_kernel::rows_tokens(isa, &d, first, ys.len(), x, 1, ys)
            });
        }
        par_rows(y, self.cols, 1, |first, ys| {
            let mut row = vec![0.0f32; self.cols];
            for (i, yi) in ys.iter_mut().enumerate() {
                self.row(first + i, &mut row);
                *yi = crate::ops::dot(&row, x);
            }
        });
    }

    /// `ys[i] = ms[i] x` for matrices that read the same input (q/k/v, gate/up): with int8
    /// activations of one block size, `x` is quantized once and every matrix's row bands go
    /// to the worker pool as one job (one wake-up and one wait instead of one per matrix).
    pub fn matvec_group(ms: &[&Matrix], x: &[f32], ys: &mut [&mut [f32]]) {
        assert_eq!(ms.len(), ys.len());
        let kernels: Option<Vec<IntKernel>> = ms.iter().map(|m| m.int8_kernel()).collect();
        let isa = kernels::active();
        let same = kernels.as_ref().filter(|ks| {
            ks.windows(2)
                .all(|w| w[0].block() == w[1].block() && w[0].chunk(isa) == w[1].chunk(isa))
        });
        let Some(ks) = same else {
            for (m, y) in ms.iter().zip(ys.iter_mut()) {
                m.matvec(x, y);
            }
            return;
        };
        for (m, y) in ms.iter().zip(ys.iter()) {
            assert!(x.len() == m.cols && y.len() == m.rows);
        }
        let mut a = QuantActs::default();
        a.quantize(x, ks[0].block(), ks[0].chunk(isa));
        let pool = kernels::pool::global();
        let threads = pool.threads();
        let mut bands: Vec<(usize, usize, std::sync::Mutex<&mut [f32]>)> = Vec::new();
        for (i, y) in ys.iter_mut().enumerate() {
            let band = band_rows(y.len(), ms[i].cols, threads, ks[i].align());
            for (b, chunk) in y.chunks_mut(band).enumerate() {
                bands.push((i, b * band, std::sync::Mutex::new(chunk)));
            }
        }
        pool.run(bands.len(), &|t| {
            let (i, first, ref out) = bands[t];
            let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
            ks[i].dot_rows(isa, first, &a, &mut out);
        });
    }

    /// `Y = X Wᵀ` for a batch of `n` activation rows (`x`: n × cols, `y`: n × rows): each
    /// weight row is read once for many tokens (prefill, perplexity, batched decoding).
    pub fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]) {
        Matrix::matmul_group(&[self], x, n, &mut [y]);
    }

    /// `ys[i] = X msᵢᵀ` for matrices that read the same `n` input rows (q/k/v, gate/up).
    ///
    /// Prefill-sized batches on the int8 or dense kernels are split by tokens: each rayon
    /// task takes a run of tokens, quantizes their activations once for every matrix, and
    /// writes its rows of each output in place. A task streams the whole of each matrix from
    /// the L3 (a layer's matrices are a few MB), so no output is assembled from parts and no
    /// activation is quantized twice. Matrices too large for the cache (the vocabulary
    /// head), small batches and the reference path take [`Matrix::matmul_bands`].
    pub fn matmul_group(ms: &[&Matrix], x: &[f32], n: usize, ys: &mut [&mut [f32]]) {
        assert_eq!(ms.len(), ys.len());
        for (m, y) in ms.iter().zip(ys.iter()) {
            assert!(x.len() == n * m.cols && y.len() == n * m.rows);
        }
        let isa = kernels::active();
        let kernels: Option<Vec<BatchKernel>> = ms
            .iter()
            .map(|m| {
                if n <= SMALL_BATCH || m.stored_bytes() > TOKEN_SPLIT_MAX_BYTES {
                    return None;
                }
                m.int8_kernel()
                    .map(BatchKernel::Int)
                    .or_else(|| m.w4a16_kernel().map(BatchKernel::W4A16))
                    .or_else(|| m.dense_kernel().map(BatchKernel::Dense))
            })
            .collect();
        let Some(ks) = kernels else {
            for (m, y) in ms.iter().zip(ys.iter_mut()) {
                m.matmul_bands(x, n, y);
            }
            return;
        };
        let cols = ms[0].cols;
        let chunk = token_chunk(n, rayon::current_num_threads());
        // tasks[c][i]: tokens of chunk c in output i.
        let mut tasks: Vec<Vec<&mut [f32]>> = (0..n.div_ceil(chunk)).map(|_| Vec::new()).collect();
        for (m, y) in ms.iter().zip(ys.iter_mut()) {
            for (c, part) in y.chunks_mut(chunk * m.rows).enumerate() {
                tasks[c].push(part);
            }
        }
        tasks.into_par_iter().enumerate().for_each(|(c, mut outs)| {
            let (t0, nt) = (c * chunk, chunk.min(n - c * chunk));
            let xc = &x[t0 * cols..(t0 + nt) * cols];
            // Activations quantized once per (block, chunk) layout among the group.
            let mut quantized: Vec<((usize, usize), Vec<QuantActs>)> = Vec::new();
            for ((k, m), out) in ks.iter().zip(ms).zip(outs.iter_mut()) {
                match k {
                    BatchKernel::Int(k) => {
                        let key = (k.block(), k.chunk(isa));
                        let at = match quantized.iter().position(|(q, _)| *q == key) {
                            Some(at) => at,
                            None => {
                                let acts = xc
                                    .chunks_exact(cols)
                                    .map(|xt| {
                                        let mut a = QuantActs::default();
                                        a.quantize(xt, key.0, key.1);
                                        a
                                    })
                                    .collect();
                                quantized.push((key, acts));
                                quantized.len() - 1
                            }
                        };
                        k.dot_rows_tokens(isa, 0, m.rows, &quantized[at].1, out);
                    }
                    BatchKernel::W4A16(p) => {
                        let sums = q4_packed::block_sums(xc, p.block);
                        q4_packed::dot_rows_f32(isa, p, 0, m.rows, xc, &sums, out)
                    }
                    BatchKernel::Dense(d) => {
                        dense_kernel::rows_tokens(isa, d, 0, m.rows, xc, nt, out)
                    }
                }
            }
        });
    }

    /// Bytes of the weights as the kernels read them.
    fn stored_bytes(&self) -> usize {
        match &self.packed {
            Some(Packed::Q4(p)) => p.data.len(),
            Some(Packed::Q8(p)) => p.data.len(),
            None => self.data.len(),
        }
    }

    /// [`Matrix::matmul`] split by rows: every weight row is read once for the whole batch.
    fn matmul_bands(&self, x: &[f32], n: usize, y: &mut [f32]) {
        if let Some(k) = self.int8_kernel() {
            return self.matmul_int8(&k, x, n, y);
        }
        if let Some(p) = self.w4a16_kernel() {
            let (isa, sums) = (kernels::active(), q4_packed::block_sums(x, p.block));
            let f = |first, count, part: &mut [f32]| {
                q4_packed::dot_rows_f32(isa, p, first, count, x, &sums, part)
            };
            return if n <= SMALL_BATCH {
                self.pool_bands(n, y, q4_packed::GROUP, f)
            } else {
                rayon_bands(self.rows, 64, n, y, f)
            };
        }
        if let Some(d) = self.dense_kernel() {
            return self.matmul_dense(&d, x, n, y);
        }
        if n <= SMALL_BATCH {
            return self.matmul_f32_small(x, n, y);
        }
        let (rows, cols) = (self.rows, self.cols);
        const TILE: usize = 16;
        let parts: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(TILE))
            .into_par_iter()
            .map(|chunk| {
                let first = chunk * TILE;
                let count = TILE.min(rows - first);
                let mut w = vec![0.0f32; count * cols];
                for (i, wr) in w.chunks_exact_mut(cols).enumerate() {
                    self.row(first + i, wr);
                }
                let mut part = vec![0.0f32; count * n];
                crate::kernels::f32_tile::tile(&w, count, x, n, cols, &mut part);
                (first, part)
            })
            .collect();
        for (first, part) in parts {
            for (i, r) in part.chunks_exact(n).enumerate() {
                for (t, &v) in r.iter().enumerate() {
                    y[t * rows + first + i] = v;
                }
            }
        }
    }

    /// Batched int8 path: every token's activations are quantized once; each task takes a
    /// band of rows (which stays in cache) across all tokens.
    fn matmul_int8(&self, k: &IntKernel, x: &[f32], n: usize, y: &mut [f32]) {
        let (rows, cols) = (self.rows, self.cols);
        let isa = kernels::active();
        if n <= SMALL_BATCH {
            return self.matmul_int8_small(k, x, n, y);
        }
        let acts: Vec<QuantActs> = x
            .par_chunks_exact(cols)
            .map(|xt| {
                let mut a = QuantActs::default();
                a.quantize(xt, k.block(), k.chunk(isa));
                a
            })
            .collect();
        rayon_bands(rows, 64, n, y, |first, count, part| {
            k.dot_rows_tokens(isa, first, count, &acts, part)
        });
    }
}

/// Prefill-sized batches: bands of `band` rows on rayon, `f(first, count, part)` filling
/// `part` (`n × count`, token-major), each part copied into `y` (`n × rows`).
fn rayon_bands(
    rows: usize,
    band: usize,
    n: usize,
    y: &mut [f32],
    f: impl Fn(usize, usize, &mut [f32]) + Sync,
) {
    let parts: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(band))
        .into_par_iter()
        .map(|b| {
            let first = b * band;
            let count = band.min(rows - first);
            let mut part = vec![0.0f32; n * count];
            f(first, count, &mut part);
            (first, part)
        })
        .collect();
    for (first, part) in parts {
        let count = part.len() / n;
        for (t, r) in part.chunks_exact(count).enumerate() {
            y[t * rows + first..t * rows + first + count].copy_from_slice(r);
        }
    }
}

/// A batched kernel that can take any run of tokens against the whole matrix.
enum BatchKernel<'a> {
    Int(IntKernel<'a>),
    W4A16(&'a PackedQ4),
    Dense(DenseMatrix<'a>),
}

/// Matrices up to this size are split by tokens in prefill (each task reads all of it, from
/// the L3); larger ones (a 65,536-row head) by rows, so they are read from memory once.
const TOKEN_SPLIT_MAX_BYTES: usize = 8 << 20;

/// Tokens per prefill task: about four tasks per thread so both cores finish together, a
/// multiple of the kernels' 4-token tiles, and at least 16 so each task reuses the weights it
/// reads.
fn token_chunk(n: usize, threads: usize) -> usize {
    n.div_ceil(threads.max(1) * 4).next_multiple_of(4).max(16)
}

/// Batches up to this many tokens (decoding several sequences at once) take the decode
/// route: the worker pool over row bands, as a mat-vec does, instead of rayon.
const SMALL_BATCH: usize = 16;

impl Matrix {
    /// A few tokens at once (batched decode): activations quantized once on this thread, row
    /// bands on the worker pool (spin-then-park, no per-call rayon scheduling), each band
    /// running the batched kernel over every token.
    fn matmul_int8_small(&self, k: &IntKernel, x: &[f32], n: usize, y: &mut [f32]) {
        let isa = kernels::active();
        let acts: Vec<QuantActs> = x
            .chunks_exact(self.cols)
            .map(|xt| {
                let mut a = QuantActs::default();
                a.quantize(xt, k.block(), k.chunk(isa));
                a
            })
            .collect();
        self.pool_bands(n, y, k.align(), |first, count, part| {
            k.dot_rows_tokens(isa, first, count, &acts, part)
        });
    }

    /// Dense weights straight from their bytes: a few tokens on the worker pool (batched
    /// decode), more on rayon in bands of rows that stay in cache across the tokens.
    fn matmul_dense(&self, d: &DenseMatrix, x: &[f32], n: usize, y: &mut [f32]) {
        let isa = kernels::active();
        if n <= SMALL_BATCH {
            return self.pool_bands(n, y, 1, |first, count, part| {
                dense_kernel::rows_tokens(isa, d, first, count, x, n, part)
            });
        }
        rayon_bands(self.rows, 32, n, y, |first, count, part| {
            dense_kernel::rows_tokens(isa, d, first, count, x, n, part)
        });
    }

    /// Dense weights, a few tokens at once: rows decoded to f32 once per band, on the pool.
    fn matmul_f32_small(&self, x: &[f32], n: usize, y: &mut [f32]) {
        let cols = self.cols;
        self.pool_bands(n, y, 1, |first, count, part| {
            let mut w = vec![0.0f32; count * cols];
            for (i, wr) in w.chunks_exact_mut(cols).enumerate() {
                self.row(first + i, wr);
            }
            let mut t = vec![0.0f32; count * n];
            crate::kernels::f32_tile::tile(&w, count, x, n, cols, &mut t);
            // `tile` writes row-major by weight row; bands hand back token-major parts.
            for (i, r) in t.chunks_exact(n).enumerate() {
                for (tk, &v) in r.iter().enumerate() {
                    part[tk * count + i] = v;
                }
            }
        });
    }

    /// Splits the rows into bands on the worker pool; `f(first, count, part)` fills `part`
    /// (`n × count`, token-major) for rows `first..first + count`, which lands in `y`.
    fn pool_bands(
        &self,
        n: usize,
        y: &mut [f32],
        align: usize,
        f: impl Fn(usize, usize, &mut [f32]) + Sync,
    ) {
        let (rows, cols) = (self.rows, self.cols);
        let pool = kernels::pool::global();
        let band = band_rows(rows, cols * n, pool.threads(), align);
        let bands = rows.div_ceil(band);
        let parts: Vec<std::sync::Mutex<Vec<f32>>> = (0..bands)
            .map(|_| std::sync::Mutex::new(Vec::new()))
            .collect();
        pool.run(bands, &|b| {
            let first = b * band;
            let count = band.min(rows - first);
            let mut part = vec![0.0f32; n * count];
            f(first, count, &mut part);
            *parts[b].lock().unwrap_or_else(|e| e.into_inner()) = part;
        });
        for (b, part) in parts.into_iter().enumerate() {
            let part = part.into_inner().unwrap_or_else(|e| e.into_inner());
            let (first, count) = (b * band, part.len() / n);
            for (t, r) in part.chunks_exact(count).enumerate() {
                y[t * rows + first..t * rows + first + count].copy_from_slice(r);
            }
        }
    }
}

/// A quantized matrix in the form the int8 kernels take.
enum IntKernel<'a> {
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

    fn chunk(&self, isa: Isa) -> usize {
        match self {
            IntKernel::Q4(_) => kernels::q4::act_chunk(isa),
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

    fn dot_rows(&self, isa: Isa, first: usize, a: &QuantActs, y: &mut [f32]) {
        match self {
            IntKernel::Q4(m) => kernels::q4::dot_rows(isa, m, first, a, y),
            IntKernel::Q4Packed(p) => {
                q4_packed::dot_rows_tokens(isa, p, first, y.len(), std::slice::from_ref(a), y)
            }
            IntKernel::Q8(m) => kernels::q8::dot_rows(isa, m, first, a, y),
            IntKernel::Q8Packed(p) => {
                q8_packed::dot_rows_tokens(isa, p, first, y.len(), std::slice::from_ref(a), y)
            }
        }
    }

    fn dot_rows_tokens(
        &self,
        isa: Isa,
        first: usize,
        count: usize,
        acts: &[QuantActs],
        out: &mut [f32],
    ) {
        match self {
            IntKernel::Q4(m) => kernels::q4::dot_rows_tokens(isa, m, first, count, acts, out),
            IntKernel::Q4Packed(p) => q4_packed::dot_rows_tokens(isa, p, first, count, acts, out),
            IntKernel::Q8(m) => kernels::q8::dot_rows_tokens(isa, m, first, count, acts, out),
            IntKernel::Q8Packed(p) => q8_packed::dot_rows_tokens(isa, p, first, count, acts, out),
        }
    }
}

/// Rows per band when `rows` rows of `work` multiply-adds each are split over `threads`: a
/// few bands per thread so every core stays busy, none under about 16K multiply-adds so
/// dispatch stays cheap, and a multiple of `align` (the packed layouts' 16-row groups).
fn band_rows(rows: usize, work: usize, threads: usize, align: usize) -> usize {
    rows.div_ceil(threads * 4)
        .max((16384 / work.max(1)).max(4))
        .next_multiple_of(align)
}

/// Runs `f(first_row, outputs)` over bands of `y` on the worker pool: a few bands per thread
/// so both cores stay busy, none smaller than about 16K multiply-adds so dispatch stays cheap.
fn par_rows(y: &mut [f32], cols: usize, align: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let pool = kernels::pool::global();
    let threads = pool.threads();
    let band = band_rows(y.len(), cols, threads, align);
    if band >= y.len() || threads == 1 {
        return f(0, y);
    }
    // Read once: this runs for every mat-vec of every token.
    static RAYON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *RAYON.get_or_init(|| std::env::var("POCKET_POOL").is_ok_and(|v| v == "rayon")) {
        return y
            .par_chunks_mut(band)
            .enumerate()
            .for_each(|(i, ys)| f(i * band, ys));
    }
    let bands: Vec<std::sync::Mutex<&mut [f32]>> =
        y.chunks_mut(band).map(std::sync::Mutex::new).collect();
    pool.run(bands.len(), &|i| {
        let mut ys = bands[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i * band, &mut ys);
    });
}

/// Where the model's tensors come from.
pub trait WeightSource {
    /// The file named in errors.
    fn describe(&self) -> String;
    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, Error>;
    /// A small vector (norm weight, bias) read fully into memory.
    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error>;
}

fn shape_error(name: &str, got: &[usize], want: &[usize]) -> Error {
    Error::Invalid(format!(
        "tensor `{name}` has shape {got:?}, expected {want:?}"
    ))
}

fn hf_dtype(t: &MappedTensor) -> Result<QuantType, Error> {
    match t.dtype {
        DType::F32 => Ok(QuantType::F32),
        DType::F16 => Ok(QuantType::F16),
        DType::BF16 => Ok(QuantType::BF16),
        DType::Other(ref d) => Err(Error::Unsupported(format!(
            "tensor `{}` has dtype {d}; weights must be F32, F16 or BF16",
            t.name
        ))),
    }
}

impl WeightSource for HfCheckpoint {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, Error> {
        let t = self.tensor(name)?;
        if t.shape != [rows, cols] {
            return Err(shape_error(name, &t.shape, &[rows, cols]));
        }
        Matrix::new(name, rows, cols, hf_dtype(t)?, t.view().clone())
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error> {
        let t = self.tensor(name)?;
        if t.shape != [len] {
            return Err(shape_error(name, &t.shape, &[len]));
        }
        hf_dtype(t)?;
        Ok(t.to_f32_vec().expect("dtype checked"))
    }
}

impl WeightSource for PocketFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, Error> {
        let t = pocket_tensor(self, name)?;
        if t.entry.shape != [rows, cols] {
            return Err(shape_error(name, &t.entry.shape, &[rows, cols]));
        }
        Matrix::from_pocket(name, rows, cols, t.entry.dtype, t.entry.layout, t.data)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error> {
        let t = pocket_tensor(self, name)?;
        if t.entry.shape != [len] {
            return Err(shape_error(name, &t.entry.shape, &[len]));
        }
        let m = Matrix::new(name, 1, len, t.entry.dtype, t.data)?;
        let mut out = vec![0.0; len];
        m.row(0, &mut out);
        Ok(out)
    }
}

fn pocket_tensor(f: &PocketFile, name: &str) -> Result<PocketTensor, Error> {
    f.tensor(name).ok_or_else(|| {
        pocket_formats::FormatError::MissingTensor {
            path: f.path.clone(),
            name: name.into(),
        }
        .into()
    })
}

impl WeightSource for GgufFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, Error> {
        let t = gguf_tensor(self, name)?;
        if t.dims != [cols as u64, rows as u64] {
            return Err(shape_error(
                name,
                &t.dims.iter().rev().map(|&d| d as usize).collect::<Vec<_>>(),
                &[rows, cols],
            ));
        }
        Matrix::ggml(
            name,
            rows,
            cols,
            t.ty,
            t.data.clone(),
            self.llama_row_map(name, rows),
        )
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error> {
        let t = gguf_tensor(self, name)?;
        if t.dims != [len as u64] {
            return Err(shape_error(
                name,
                &t.dims.iter().map(|&d| d as usize).collect::<Vec<_>>(),
                &[len],
            ));
        }
        let m = Matrix::ggml(name, 1, len, t.ty, t.data.clone(), None)?;
        let mut v = vec![0.0; len];
        m.row(0, &mut v);
        if let Some(fam) = pocket_formats::gguf::model::family(self) {
            let shift = pocket_formats::gguf::model::norm_shift(fam, name);
            v.iter_mut().for_each(|x| *x += shift);
        }
        if let Some(map) = self.llama_row_map(name, len) {
            v = map.iter().map(|&i| v[i as usize]).collect();
        }
        Ok(v)
    }
}

trait LlamaLayout {
    fn llama_row_map(&self, hf_name: &str, rows: usize) -> Option<Vec<u32>>;
}

impl LlamaLayout for GgufFile {
    /// llama.cpp's converter interleaves the rows of each q/k head for `llama` models.
    fn llama_row_map(&self, hf_name: &str, rows: usize) -> Option<Vec<u32>> {
        if self.architecture() != Some("llama")
            || !(hf_name.contains("self_attn.q_proj") || hf_name.contains("self_attn.k_proj"))
        {
            return None;
        }
        let spec = pocket_formats::gguf::model::spec(self).ok()?;
        Some(
            (0..rows)
                .map(|r| pocket_formats::gguf::model::llama_qk_row(r, spec.head_dim) as u32)
                .collect(),
        )
    }
}

fn gguf_tensor<'a>(
    f: &'a GgufFile,
    hf: &str,
) -> Result<&'a pocket_formats::gguf::GgufTensor, Error> {
    use pocket_formats::gguf::model::{family, gguf_name};
    let g = family(f).and_then(|fam| gguf_name(hf, fam));
    g.as_deref().and_then(|g| f.tensor(g)).ok_or_else(|| {
        pocket_formats::FormatError::MissingTensor {
            path: f.path.clone(),
            name: g.unwrap_or_else(|| hf.into()),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;
    use pocket_formats::quant::{q4::Options, search::Method};

    /// A matrix over `bytes`, mapped from a temporary file as the loaders map model files.
    fn matrix(
        dir: &tempfile::TempDir,
        rows: usize,
        cols: usize,
        q: QuantType,
        bytes: &[u8],
    ) -> Matrix {
        let path = dir
            .path()
            .join(format!("{q}-{rows}x{cols}.bin").replace(['/', ' '], "_"));
        std::fs::write(&path, bytes).unwrap();
        Matrix::new("w", rows, cols, q, ByteView::map_file(&path).unwrap()).unwrap()
    }

    #[test]
    fn prefill_split_by_tokens_equals_split_by_rows_and_per_token_products() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(5);
        let (rows, cols, n) = (48, 256, 37);
        let w = rng.vec(rows * cols, 1.0);
        let x = rng.vec(n * cols, 2.0);
        let q4 = |block, sym| {
            let opt = Options {
                block,
                sym,
                method: Method::Rtn,
                grid: false,
                importance: None,
            };
            q4::quantize(&w, rows, cols, opt).bytes
        };
        let bf16: Vec<u8> = w
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        let cases = [
            (
                QuantType::Q4 {
                    block: 64,
                    sym: false,
                },
                q4(64, false),
            ),
            (
                QuantType::Q4 {
                    block: 32,
                    sym: true,
                },
                q4(32, true),
            ),
            (
                QuantType::Q8 { block: 64 },
                q8::quantize(&w, rows, cols, 64).0,
            ),
            (QuantType::BF16, bf16),
        ];
        for (q, bytes) in cases {
            let m = matrix(&dir, rows, cols, q, &bytes);
            // Two matrices in one group, as q/k/v are.
            let mut a = vec![0.0; n * rows];
            let mut b = vec![0.0; n * rows];
            Matrix::matmul_group(&[&m, &m], &x, n, &mut [&mut a, &mut b]);
            let mut bands = vec![0.0; n * rows];
            m.matmul_bands(&x, n, &mut bands);
            assert_eq!(a, bands, "{q}: tokens vs rows");
            assert_eq!(a, b, "{q}: group members");
            let mut y = vec![0.0; rows];
            for t in 0..n {
                m.matvec(&x[t * cols..(t + 1) * cols], &mut y);
                for (r, (&got, &want)) in a[t * rows..(t + 1) * rows].iter().zip(&y).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{q} t={t} r={r}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
