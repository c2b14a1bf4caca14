//! Dense weights (f32, f16, bf16) times f32 activations, read straight from the stored bytes:
//! the full-precision baseline of every drift measurement (an HF bf16 checkpoint) runs here.
//! Weights are widened to f32 in registers and accumulated in f32, so the result is the
//! f32 product of the stored values, with no rounding of the activations.
//!
//! `out[t·count + i] = Σ_k W[first + i][k] · x[t·cols + k]` for `i < count`, `t < n`:
//! token-major, as the batched callers want it.

use super::{Cpu, Isa};
use pocket_formats::quant::dense;

/// How a dense matrix stores one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseKind {
    F32,
    F16,
    BF16,
}

impl DenseKind {
    pub fn bytes(self) -> usize {
        match self {
            DenseKind::F32 => 4,
            DenseKind::F16 | DenseKind::BF16 => 2,
        }
    }
}

/// A row-major `[rows, cols]` matrix of little-endian values.
#[derive(Clone, Copy)]
pub struct DenseMatrix<'a> {
    pub bytes: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub kind: DenseKind,
}

impl DenseMatrix<'_> {
    fn check(&self, first: usize, count: usize, x: &[f32], n: usize, out: &[f32]) {
        assert!(self.bytes.len() >= self.rows * self.cols * self.kind.bytes());
        assert!(first + count <= self.rows);
        assert!(x.len() >= n * self.cols && out.len() >= n * count);
    }
}

/// Runs the best kernel for `cpu` (AVX-512 or NEON where present, else the scalar twin).
pub fn rows_tokens(
    cpu: Cpu,
    m: &DenseMatrix,
    first: usize,
    count: usize,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    m.check(first, count, x, n, out);
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx512) {
        // SAFETY: the `Cpu` token proves the CPU has (AVX-512 F/BW/VL, F16C);
        // the sizes were checked above.
        return unsafe { super::x86::avx512::dense::rows_tokens(m, first, count, x, n, out) };
    }
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the sizes were checked above.
        return unsafe { super::aarch64::dense::rows_tokens(m, first, count, x, n, out) };
    }
    let _ = cpu;
    rows_tokens_scalar(m, first, count, x, n, out)
}

/// The scalar twin: decode each row with the codec, then a plain f32 dot product per token.
pub fn rows_tokens_scalar(
    m: &DenseMatrix,
    first: usize,
    count: usize,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    m.check(first, count, x, n, out);
    let (cols, b) = (m.cols, m.kind.bytes());
    let mut row = vec![0.0f32; cols];
    for i in 0..count {
        let bytes = &m.bytes[(first + i) * cols * b..][..cols * b];
        match m.kind {
            DenseKind::F32 => dense::decode_f32(bytes, &mut row),
            DenseKind::F16 => dense::decode_f16(bytes, &mut row),
            DenseKind::BF16 => dense::decode_bf16(bytes, &mut row),
        }
        for t in 0..n {
            out[t * count + i] = super::scalar::dot(&row, &x[t * cols..(t + 1) * cols]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;
    use half::{bf16, f16};

    fn encode(kind: DenseKind, v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match kind {
                DenseKind::F32 => x.to_le_bytes().to_vec(),
                DenseKind::F16 => f16::from_f32(x).to_le_bytes().to_vec(),
                DenseKind::BF16 => bf16::from_f32(x).to_le_bytes().to_vec(),
            })
            .collect()
    }

    #[test]
    fn every_path_matches_the_scalar_twin_on_odd_sizes() {
        let mut rng = Rng(11);
        for kind in [DenseKind::F32, DenseKind::F16, DenseKind::BF16] {
            for &(rows, cols) in &[(1, 1), (3, 15), (9, 17), (13, 64), (6, 100), (21, 576)] {
                let w = encode(kind, &rng.vec(rows * cols, 1.0));
                let m = DenseMatrix {
                    bytes: &w,
                    rows,
                    cols,
                    kind,
                };
                for n in [1, 2, 3, 4, 5, 9] {
                    let x = rng.vec(n * cols, 2.0);
                    let first = rows / 3;
                    let count = rows - first;
                    let mut want = vec![0.0; n * count];
                    rows_tokens_scalar(&m, first, count, &x, n, &mut want);
                    for isa in crate::available() {
                        let mut got = vec![f32::NAN; n * count];
                        rows_tokens(isa, &m, first, count, &x, n, &mut got);
                        for (g, e) in got.iter().zip(&want) {
                            // Same products, other summation order: f32 rounding only.
                            let tol = 1e-5 * (cols as f32).sqrt() * 2.0;
                            assert!(
                                (g - e).abs() <= tol,
                                "{kind:?} {rows}x{cols} n={n} {isa:?}: {g} vs {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}
