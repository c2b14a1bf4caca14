//! 4-bit weight rows times int8 activations.
//!
//! A row's value is `Σ_b Σ_{i∈b} ((q_i − 8)·s_b + z_b) · x_i` with `x_i ≈ sx_b · xq_i`, which
//! regroups into `Σ_b (s_b·sx_b)·Σ q_i·xq_i  +  Σ_b (z_b − 8·s_b)·(sx_b·Σ xq_i)`: one integer
//! dot product of codes and activations per block, and a per-block correction that needs only
//! the activations' block sums. Symmetric blocks have `z = 0`.

use super::act::QuantActs;
use super::{Cpu, Isa};
use half::f16;

/// A Q4 matrix as stored: the codes plane (two codes per byte, first in the high nibble) and
/// the parameters plane (`(zero, scale)` f16 pairs, or one f16 scale when symmetric).
#[derive(Clone, Copy)]
pub struct Q4Matrix<'a> {
    pub codes: &'a [u8],
    pub params: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
    pub sym: bool,
}

impl<'a> Q4Matrix<'a> {
    /// The view of a stored Q4 tensor's bytes (codes plane, then parameters plane).
    pub fn from_bytes(bytes: &'a [u8], rows: usize, cols: usize, block: usize, sym: bool) -> Self {
        let (codes, params) = pocket_formats::quant::q4::planes(bytes, rows, cols);
        Q4Matrix {
            codes,
            params,
            rows,
            cols,
            block,
            sym,
        }
    }

    fn param_bytes(&self) -> usize {
        if self.sym {
            2
        } else {
            4
        }
    }

    /// (scale, zero − 8·scale) of block `b` of row `r`.
    #[inline]
    fn block_params(&self, r: usize, b: usize) -> (f32, f32) {
        let nb = self.cols / self.block;
        let pb = self.param_bytes();
        let p = &self.params[(r * nb + b) * pb..][..pb];
        if self.sym {
            let s = f16::from_le_bytes([p[0], p[1]]).to_f32();
            (s, -8.0 * s)
        } else {
            let z = f16::from_le_bytes([p[0], p[1]]).to_f32();
            let s = f16::from_le_bytes([p[2], p[3]]).to_f32();
            (s, z - 8.0 * s)
        }
    }

    fn check(&self) {
        assert!(self.block % 32 == 0 && self.cols % self.block == 0);
        assert!(self.codes.len() >= self.rows * self.cols / 2);
        assert!(self.params.len() >= self.rows * (self.cols / self.block) * self.param_bytes());
    }
}

/// The activation chunk the Q4 kernels of `cpu` read (see [`QuantActs::perm`]).
pub fn act_chunk(cpu: Cpu) -> usize {
    match cpu.isa() {
        Isa::Avx512 | Isa::Amx => 128,
        Isa::Avx2 => 64,
        _ => 0,
    }
}

/// Whether `isa`'s SIMD kernel handles this shape (else the scalar twin runs).
#[cfg(target_arch = "x86_64")]
fn simd_fits(w: &Q4Matrix) -> bool {
    w.cols % 64 == 0
}

/// `y[i] = row(first + i) · x` for `x` quantized by `a` (same block as `w`, chunk from
/// [`act_chunk`] of `cpu`).
pub fn dot_rows(cpu: Cpu, w: &Q4Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    w.check();
    assert!(a.cols == w.cols && a.block == w.block && first + y.len() <= w.rows);
    // Activations laid out for another kernel are a caller's bug, not a reason to run slowly.
    assert_eq!(
        a.chunk,
        act_chunk(cpu),
        "activations quantized for another kernel"
    );
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if simd_fits(w) => {
            // SAFETY: the CPU has AVX-512 F/BW/VL/VNNI, F16C and FMA (the `Cpu` token proves it); the
            // shapes and buffer lengths were checked by `check` and the assertion.
            unsafe { super::x86::avx512::q4::dot_rows(w, first, a, y) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if simd_fits(w) => {
            // SAFETY: as above, for AVX2, FMA and F16C.
            unsafe { super::x86::avx2::q4::dot_rows(w, first, a, y) }
        }
        _ => dot_rows_scalar(w, first, a, y),
    }
}

/// Many tokens at once (prefill): `out[t·count + i] = row(first + i) · x_t`.
pub fn dot_rows_tokens(
    cpu: Cpu,
    w: &Q4Matrix,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    w.check();
    assert!(first + count <= w.rows && out.len() == acts.len() * count);
    assert!(acts
        .iter()
        .all(|a| a.cols == w.cols && a.block == w.block && a.chunk == act_chunk(cpu)));
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx512) && simd_fits(w) {
        // SAFETY: AVX-512 F/BW/VL/VNNI, FMA and F16C are present (the `Cpu` token proves it); the
        // shapes, block, activation layout and output length were checked above and by `check`.
        return unsafe { super::x86::avx512::q4::dot_rows_tokens(w, first, count, acts, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.isa() == Isa::Avx2 && simd_fits(w) {
        // SAFETY: AVX2, FMA and F16C are present (the `Cpu` token proves it); the shapes, block,
        // activation layout and output length were checked above and by `check`.
        return unsafe { super::x86::avx2::q4::dot_rows_tokens(w, first, count, acts, out) };
    }
    for (a, o) in acts.iter().zip(out.chunks_exact_mut(count)) {
        dot_rows(cpu, w, first, a, o);
    }
}

/// The scalar twin: the definition the SIMD versions must match (up to float summation order).
pub fn dot_rows_scalar(w: &Q4Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    for (i, out) in y.iter_mut().enumerate() {
        let r = first + i;
        let codes = &w.codes[r * cols / 2..(r + 1) * cols / 2];
        let (mut main, mut correction) = (0.0f32, 0.0f32);
        for b in 0..cols / block {
            let (s, m) = w.block_params(r, b);
            let mut dot = 0i32;
            for j in 0..block / 2 {
                let byte = codes[b * block / 2 + j];
                let x = &a.q[b * block + 2 * j..];
                dot += (byte >> 4) as i32 * x[0] as i32 + (byte & 0x0F) as i32 * x[1] as i32;
            }
            main += s * a.scale[b] * dot as f32;
            correction += m * a.scaled_sum[b];
        }
        *out = main + correction;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{each_q4_case, Rng};
    use pocket_formats::quant::q4 as codec;

    /// Every kernel agrees with the scalar twin, and the twin with the f32 decode of the same
    /// codes times the dequantized activations.
    #[test]
    fn every_isa_matches_the_scalar_twin() {
        let mut rng = Rng(11);
        each_q4_case(
            &mut rng,
            &[(3, 64), (7, 192), (5, 576), (9, 896), (2, 1024), (4, 2560)],
            |rng, rows, cols, block, sym, bytes| {
                let (codes, params) = codec::planes(bytes, rows, cols);
                let w = Q4Matrix::from_bytes(bytes, rows, cols, block, sym);
                let x = rng.vec(cols, 3.0);
                let mut want = vec![0.0; rows];
                let mut a = QuantActs::default();
                a.quantize(crate::Cpu::detect(), &x, block, 0);
                dot_rows_scalar(&w, 0, &a, &mut want);
                // The twin against plain f32 math on the same codes.
                let xd = a.dequantize();
                let mut row = vec![0.0; cols];
                for r in 0..rows {
                    let pl = cols / block * if sym { 2 } else { 4 };
                    codec::dequantize_row(
                        &codes[r * cols / 2..][..cols / 2],
                        &params[r * pl..][..pl],
                        block,
                        sym,
                        &mut row,
                    );
                    let f: f32 = row.iter().zip(&xd).map(|(a, b)| a * b).sum();
                    assert!(
                        (f - want[r]).abs() <= 1e-4 * (1.0 + f.abs()),
                        "{f} {}",
                        want[r]
                    );
                }
                for isa in crate::available() {
                    // Several tokens at once: the batched kernel against the twin.
                    let xs: Vec<Vec<f32>> = (0..6).map(|_| rng.vec(cols, 2.0)).collect();
                    let acts: Vec<QuantActs> = xs
                        .iter()
                        .map(|x| {
                            let mut a = QuantActs::default();
                            a.quantize(crate::Cpu::detect(), x, block, act_chunk(isa));
                            a
                        })
                        .collect();
                    let mut got = vec![0.0; 6 * (rows - 1)];
                    dot_rows_tokens(isa, &w, 1, rows - 1, &acts, &mut got);
                    for (t, x) in xs.iter().enumerate() {
                        let mut a = QuantActs::default();
                        a.quantize(crate::Cpu::detect(), x, block, 0);
                        let mut e = vec![0.0; rows - 1];
                        dot_rows_scalar(&w, 1, &a, &mut e);
                        for (g, e) in got[t * (rows - 1)..(t + 1) * (rows - 1)].iter().zip(&e) {
                            assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "{isa:?} batched");
                        }
                    }
                    a.quantize(crate::Cpu::detect(), &x, block, act_chunk(isa));
                    // Rows 1.. only: a non-zero first row exercises the offsets.
                    let mut got = vec![0.0; rows - 1];
                    dot_rows(isa, &w, 1, &a, &mut got);
                    for (g, e) in got.iter().zip(&want[1..]) {
                        assert!(
                            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{isa:?} {rows}x{cols} b{block} sym={sym}: {g} vs {e}"
                        );
                    }
                }
            },
        );
    }
}
