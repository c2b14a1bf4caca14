//! Products with a [`Matrix`]: one token (`matvec`, a group of matrices on one input), and
//! batches (`matmul`: prefill, perplexity, batched decoding), each on the kernel the matrix's
//! storage takes.

use super::bands::{band_rows, par_rows, rayon_bands, run_bands, Band};
use super::{IntKernel, Matrix};
use crate::kernels::dense::{self as dense_kernel, DenseMatrix};
use crate::kernels::q4_packed::{self, PackedQ4};
use crate::kernels::{self, act::QuantActs, q8_packed, w4a16, w8a16};
use crate::pool;
use rayon::prelude::*;

impl Matrix {
    /// `y = W x`, rows split across the thread pool.
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) {
        assert!(x.len() == self.cols && y.len() == self.rows);
        if let Some(k) = self.int8_kernel() {
            let cpu = self.config.cpu;
            let mut a: Vec<QuantActs> = (0..self.act_digits())
                .map(|_| QuantActs::default())
                .collect();
            QuantActs::quantize_digits(cpu, x, k.block(), k.chunk(cpu), &mut a);
            par_rows(y, self.cols, k.align(), |first, ys| {
                k.dot_rows(cpu, first, &a, ys)
            });
            return;
        }
        if let Some(p) = self.w4a16_kernel() {
            let cpu = self.config.cpu;
            let sums = w4a16::block_sums(x, p.block);
            return par_rows(y, self.cols, q4_packed::GROUP, |first, ys| {
                w4a16::dot_rows_f32(cpu, p, first, ys.len(), x, &sums, ys)
            });
        }
        if let Some(d) = self.dense_kernel() {
            let cpu = self.config.cpu;
            return par_rows(y, self.cols, 1, |first, ys| {
                dense_kernel::rows_tokens(cpu, &d, first, ys.len(), x, 1, ys)
            });
        }
        if let Some(p) = self.w8a16_kernel() {
            // The bits of the fallback below (a decoded row and `scalar::dot`), without the
            // decoded row.
            let cpu = self.config.cpu;
            return par_rows(y, self.cols, q8_packed::GROUP, |first, ys| {
                w8a16::dot_rows_f32(cpu, p, first, ys.len(), x, ys)
            });
        }
        par_rows(y, self.cols, 1, |first, ys| {
            let mut row = vec![0.0f32; self.cols];
            for (i, yi) in ys.iter_mut().enumerate() {
                self.row(first + i, &mut row);
                *yi = crate::kernels::scalar::dot(&row, x);
            }
        });
    }

    /// `ys[i] = ms[i] x` for matrices that read the same input (q/k/v, gate/up): with int8
    /// activations of one block size, `x` is quantized once and every matrix's row bands go
    /// to the worker pool as one job (one wake-up and one wait instead of one per matrix).
    pub fn matvec_group(ms: &[&Matrix], x: &[f32], ys: &mut [&mut [f32]]) {
        Matrix::matvec_group_with(ms, x, ys, 0, &|_| {});
    }

    /// [`Matrix::matvec_group`] with `extra` more tasks `f(0..extra)` in the same pool job, run
    /// first (an adapter's projections of the same input: `crate::model::lora_group`), or
    /// after the products where the matrices take other kernels.
    pub fn matvec_group_with(
        ms: &[&Matrix],
        x: &[f32],
        ys: &mut [&mut [f32]],
        extra: usize,
        f: &(dyn Fn(usize) + Sync),
    ) {
        assert_eq!(ms.len(), ys.len());
        let kernels: Option<Vec<IntKernel>> = ms.iter().map(|m| m.int8_kernel()).collect();
        let cpu = ms[0].config.cpu;
        let same = kernels.as_ref().filter(|ks| {
            ks.windows(2)
                .all(|w| w[0].block() == w[1].block() && w[0].chunk(cpu) == w[1].chunk(cpu))
        });
        let Some(ks) = same else {
            for (m, y) in ms.iter().zip(ys.iter_mut()) {
                m.matvec(x, y);
            }
            pool::global().run(extra, f);
            return;
        };
        for (m, y) in ms.iter().zip(ys.iter()) {
            assert!(x.len() == m.cols && y.len() == m.rows);
        }
        let mut a: Vec<QuantActs> = (0..ms[0].act_digits())
            .map(|_| QuantActs::default())
            .collect();
        QuantActs::quantize_digits(cpu, x, ks[0].block(), ks[0].chunk(cpu), &mut a);
        let pool = pool::global();
        let threads = pool.threads();
        let mut bands: Vec<(usize, usize, std::sync::Mutex<&mut [f32]>)> = Vec::new();
        for (i, y) in ys.iter_mut().enumerate() {
            let band = band_rows(y.len(), ms[i].cols, threads, ks[i].align());
            for (b, chunk) in y.chunks_mut(band).enumerate() {
                bands.push((i, b * band, std::sync::Mutex::new(chunk)));
            }
        }
        pool.run(extra + bands.len(), &|t| {
            if t < extra {
                return f(t);
            }
            let (i, first, ref out) = bands[t - extra];
            let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
            ks[i].dot_rows(cpu, first, &a, &mut out);
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
        let cpu = ms[0].config.cpu;
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
                        let key = (k.block(), k.chunk(cpu));
                        let at = match quantized.iter().position(|(q, _)| *q == key) {
                            Some(at) => at,
                            None => {
                                let digits = m.act_digits();
                                let mut acts: Vec<QuantActs> =
                                    (0..nt * digits).map(|_| QuantActs::default()).collect();
                                for (xt, a) in
                                    xc.chunks_exact(cols).zip(acts.chunks_exact_mut(digits))
                                {
                                    QuantActs::quantize_digits(cpu, xt, key.0, key.1, a);
                                }
                                quantized.push((key, acts));
                                quantized.len() - 1
                            }
                        };
                        let acts = &quantized[at].1;
                        k.dot_rows_tokens(cpu, 0, m.rows, acts, out, acts.len() / nt);
                    }
                    BatchKernel::W4A16(p) => {
                        let sums = w4a16::block_sums(xc, p.block);
                        w4a16::dot_rows_f32(cpu, p, 0, m.rows, xc, &sums, out)
                    }
                    BatchKernel::Dense(d) => {
                        dense_kernel::rows_tokens(cpu, d, 0, m.rows, xc, nt, out)
                    }
                }
            }
        });
    }

    /// [`Matrix::matmul`] where each row's result must be bit for bit the mat-vec's
    /// ([`Matrix::matmul_group_as_matvec`]).
    pub fn matmul_as_matvec(&self, x: &[f32], n: usize, y: &mut [f32]) {
        Matrix::matmul_group_as_matvec(&[self], x, n, &mut [y]);
    }

    /// [`Matrix::matmul_group`], each row's result equal bit for bit to a mat-vec of that row
    /// (speculative decoding's verification). The int8 and dense kernels run a few tokens
    /// through the same per-token arithmetic as one (tests/engine/speculative.rs holds them to
    /// it on every ISA), so up to [`SMALL_BATCH`] rows take them and read the weights once. The
    /// W4A16 kernels split a token's f32 sums over as many accumulators as its tile leaves
    /// registers for, and the f32 fallback's tile sums in another order: those (and bigger
    /// batches) take one mat-vec per row.
    pub fn matmul_group_as_matvec(ms: &[&Matrix], x: &[f32], n: usize, ys: &mut [&mut [f32]]) {
        let same = ms
            .iter()
            .all(|m| m.int8_kernel().is_some() || m.dense_kernel().is_some());
        if n <= SMALL_BATCH && same {
            if !Matrix::matmul_group_small_int8(ms, x, n, ys) {
                for (m, y) in ms.iter().zip(ys.iter_mut()) {
                    m.matmul_bands(x, n, y);
                }
            }
            return;
        }
        let cols = ms[0].cols;
        for t in 0..n {
            let mut rows: Vec<&mut [f32]> = ms
                .iter()
                .zip(ys.iter_mut())
                .map(|(m, y)| &mut y[t * m.rows..(t + 1) * m.rows])
                .collect();
            Matrix::matvec_group(ms, &x[t * cols..(t + 1) * cols], &mut rows);
        }
    }

    /// [`Matrix::matmul`] split by rows: every weight row is read once for the whole batch.
    fn matmul_bands(&self, x: &[f32], n: usize, y: &mut [f32]) {
        if let Some(k) = self.int8_kernel() {
            return self.matmul_int8(&k, x, n, y);
        }
        if let Some(p) = self.w4a16_kernel() {
            let (cpu, sums) = (self.config.cpu, w4a16::block_sums(x, p.block));
            let f = |first, count, part: &mut [f32]| {
                w4a16::dot_rows_f32(cpu, p, first, count, x, &sums, part)
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
                crate::kernels::f32_tile::tile(self.config.cpu, &w, count, x, n, cols, &mut part);
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
        let cpu = self.config.cpu;
        if n <= SMALL_BATCH {
            return self.matmul_int8_small(k, x, n, y);
        }
        let digits = self.act_digits();
        let mut acts: Vec<QuantActs> = (0..n * digits).map(|_| QuantActs::default()).collect();
        x.par_chunks_exact(cols)
            .zip(acts.par_chunks_exact_mut(digits))
            .for_each(|(xt, a)| QuantActs::quantize_digits(cpu, xt, k.block(), k.chunk(cpu), a));
        rayon_bands(rows, 64, n, y, |first, count, part| {
            k.dot_rows_tokens(cpu, first, count, &acts, part, digits)
        });
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
        let cpu = self.config.cpu;
        let digits = self.act_digits();
        let acts = quantize_tokens(cpu, x, self.cols, k.block(), k.chunk(cpu), digits);
        self.pool_bands(n, y, k.align(), |first, count, part| {
            k.dot_rows_tokens(cpu, first, count, &acts, part, digits)
        });
        recycle(acts);
    }

    /// Dense weights straight from their bytes: a few tokens on the worker pool (batched
    /// decode), more on rayon in bands of rows that stay in cache across the tokens.
    fn matmul_dense(&self, d: &DenseMatrix, x: &[f32], n: usize, y: &mut [f32]) {
        let cpu = self.config.cpu;
        if n <= SMALL_BATCH {
            return self.pool_bands(n, y, 1, |first, count, part| {
                dense_kernel::rows_tokens(cpu, d, first, count, x, n, part)
            });
        }
        rayon_bands(self.rows, 32, n, y, |first, count, part| {
            dense_kernel::rows_tokens(cpu, d, first, count, x, n, part)
        });
    }

    /// A few tokens through a group of int8-kernel matrices with one activation layout (q/k/v,
    /// gate/up): the activations quantized once, every matrix's row bands in one job on the
    /// worker pool (as [`Matrix::matvec_group`] does for one token), each band on the batched
    /// kernel. False (nothing done) when the group does not qualify.
    fn matmul_group_small_int8(ms: &[&Matrix], x: &[f32], n: usize, ys: &mut [&mut [f32]]) -> bool {
        let Some(ks) = ms
            .iter()
            .map(|m| m.int8_kernel())
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        let cpu = ms[0].config.cpu;
        if !ks
            .windows(2)
            .all(|w| w[0].block() == w[1].block() && w[0].chunk(cpu) == w[1].chunk(cpu))
        {
            return false;
        }
        let digits = ms[0].act_digits();
        let acts = quantize_tokens(cpu, x, ms[0].cols, ks[0].block(), ks[0].chunk(cpu), digits);
        let threads = pool::global().threads();
        let mut bands: Vec<Band> = Vec::new();
        for (i, m) in ms.iter().enumerate() {
            let band = band_rows(m.rows, m.cols * n, threads, ks[i].align());
            for first in (0..m.rows).step_by(band) {
                let count = band.min(m.rows - first);
                bands.push(Band {
                    matrix: i,
                    first,
                    count,
                });
            }
        }
        run_bands(&bands, n, ys, |b, part| {
            ks[b.matrix].dot_rows_tokens(cpu, b.first, b.count, &acts, part, digits)
        });
        recycle(acts);
        true
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
            crate::kernels::f32_tile::tile(self.config.cpu, &w, count, x, n, cols, &mut t);
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
        let rows = self.rows;
        let band = band_rows(rows, self.cols * n, pool::global().threads(), align);
        let bands: Vec<Band> = (0..rows)
            .step_by(band)
            .map(|first| Band {
                matrix: 0,
                first,
                count: band.min(rows - first),
            })
            .collect();
        run_bands(&bands, n, &mut [y], |b, part| f(b.first, b.count, part));
    }
}

/// Each token's activations quantized for the int8 kernels, a token per task on the worker
/// pool (on the calling thread alone this was most of what the pool's other workers waited on
/// in a 16-token decode step).
fn quantize_tokens(
    cpu: kernels::Cpu,
    x: &[f32],
    cols: usize,
    block: usize,
    chunk: usize,
    digits: usize,
) -> Vec<QuantActs> {
    let slots: Vec<std::sync::Mutex<Vec<QuantActs>>> = SPARE_ACTS.with(|spare| {
        let mut spare = spare.borrow_mut();
        x.chunks_exact(cols)
            .map(|_| {
                std::sync::Mutex::new(
                    (0..digits)
                        .map(|_| spare.pop().unwrap_or_default())
                        .collect(),
                )
            })
            .collect()
    });
    pool::global().run(slots.len(), &|t| {
        let mut a = slots[t].lock().unwrap_or_else(|e| e.into_inner());
        QuantActs::quantize_digits(cpu, &x[t * cols..(t + 1) * cols], block, chunk, &mut a);
    });
    slots
        .into_iter()
        .flat_map(|a| a.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

thread_local! {
    /// Quantized activations [`quantize_tokens`] handed out and got back, kept for the next
    /// call on this thread: a 16-row decode step quantizes some 2,000 rows, and four fresh
    /// vectors each (allocated, then freed) were a tenth of the engine thread's time.
    /// `QuantActs::quantize` sets every value it reads, so a reused one gives the same bits.
    static SPARE_ACTS: std::cell::RefCell<Vec<QuantActs>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Returns [`quantize_tokens`]'s activations for reuse (at most the 16 of a decode batch and a
/// few more are kept).
fn recycle(acts: Vec<QuantActs>) {
    SPARE_ACTS.with(|spare| {
        let mut spare = spare.borrow_mut();
        for a in acts {
            if spare.len() < 4 * SMALL_BATCH {
                spare.push(a);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;
    use crate::kernels::testutil::Rng;
    use pocket_formats::bytes::ByteView;
    use pocket_formats::quant::{q4, q4::Options, q8, search::Method, QuantType};

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
        Matrix::new(
            "w",
            rows,
            cols,
            q,
            ByteView::map_file(&path).unwrap(),
            EngineConfig::fast(),
        )
        .unwrap()
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
                compensation: None,
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
