//! 8-bit weight rows times int8 activations: `Σ_b (s_b·sx_b) · Σ_{i∈b} q_i·xq_i`.

use super::act::QuantActs;
use super::Cpu;
#[cfg(target_arch = "x86_64")]
use super::Isa;
use half::f16;

/// A Q8 matrix as stored: the codes plane (i8, row-major), then one f16 scale per block.
#[derive(Clone, Copy)]
pub struct Q8Matrix<'a> {
    pub codes: &'a [u8],
    pub scales: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
}

impl Q8Matrix<'_> {
    #[inline]
    pub(crate) fn scale(&self, r: usize, b: usize) -> f32 {
        let i = (r * (self.cols / self.block) + b) * 2;
        f16::from_le_bytes([self.scales[i], self.scales[i + 1]]).to_f32()
    }

    fn check(&self) {
        assert!(self.block > 0 && self.cols % self.block == 0);
        assert!(self.codes.len() >= self.rows * self.cols);
        assert!(self.scales.len() >= self.rows * (self.cols / self.block) * 2);
    }
}

/// `y[i] = row(first + i) · x` for `x` quantized by `a` in the matrix's blocks.
pub fn dot_rows(cpu: Cpu, w: &Q8Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    w.check();
    assert!(a.cols == w.cols && a.block == w.block && first + y.len() <= w.rows);
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if w.block % 64 == 0 => {
            // SAFETY: the CPU has AVX-512 F/BW/VL/VNNI, F16C and FMA (the `Cpu` token proves it);
            // shapes and lengths were checked by `check` and the assertion.
            unsafe { super::x86::avx512::q8::dot_rows(w, first, a, y) }
        }
        // An AVX-512 CPU whose blocks the AVX-512 kernel cannot take runs the AVX2 one (every
        // level has the ones below it), not the scalar twin.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx | Isa::Avx2 if w.block % 32 == 0 => {
            // SAFETY: the CPU has AVX2, FMA and F16C (the AVX-512 level includes them); shapes
            // and lengths were checked as above.
            unsafe { super::x86::avx2::q8::dot_rows(w, first, a, y) }
        }
        _ => dot_rows_scalar(w, first, a, y),
    }
}

/// Many tokens at once (prefill, batched decode): `out[t·count + i] = row(first + i) · x_t`.
pub fn dot_rows_tokens(
    cpu: Cpu,
    w: &Q8Matrix,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    w.check();
    assert!(first + count <= w.rows && out.len() == acts.len() * count);
    assert!(acts.iter().all(|a| a.cols == w.cols && a.block == w.block));
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx512) && w.block % 64 == 0 {
        // SAFETY: the CPU has AVX-512 F/BW/VL/VNNI, F16C and FMA (the `Cpu` token proves it);
        // shapes, blocks and lengths were checked by `check` and the assertions.
        return unsafe { super::x86::avx512::q8::dot_rows_tokens(w, first, count, acts, out) };
    }
    for (a, o) in acts.iter().zip(out.chunks_exact_mut(count)) {
        dot_rows(cpu, w, first, a, o);
    }
}

/// The scalar twin.
pub fn dot_rows_scalar(w: &Q8Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    for (i, out) in y.iter_mut().enumerate() {
        let r = first + i;
        let codes = &w.codes[r * cols..(r + 1) * cols];
        let mut acc = 0.0f32;
        for b in 0..cols / block {
            let dot: i32 = codes[b * block..(b + 1) * block]
                .iter()
                .zip(&a.q[b * block..(b + 1) * block])
                .map(|(&c, &x)| c as i8 as i32 * x as i32)
                .sum();
            acc += w.scale(r, b) * a.scale[b] * dot as f32;
        }
        *out = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;
    use pocket_formats::quant::q8 as codec;

    #[test]
    fn every_isa_matches_the_scalar_twin() {
        let mut rng = Rng(5);
        // Block 32 too: an AVX-512 CPU runs those on the AVX2 kernel.
        for (block, &(rows, cols)) in [32usize, 64].into_iter().flat_map(|b| {
            [(3, 64), (5, 576), (6, 896), (3, 2560)]
                .iter()
                .map(move |s| (b, s))
        }) {
            let v = rng.vec(rows * cols, 0.2);
            let (bytes, _) = codec::quantize(&v, rows, cols, block);
            let (codes, scales) = bytes.split_at(rows * cols);
            let w = Q8Matrix {
                codes,
                scales,
                rows,
                cols,
                block,
            };
            let x = rng.vec(cols, 2.0);
            let mut a = QuantActs::default();
            a.quantize(crate::Cpu::detect(), &x, block, 0);
            let mut want = vec![0.0; rows];
            dot_rows_scalar(&w, 0, &a, &mut want);
            let xd = a.dequantize();
            let mut row = vec![0.0; cols];
            for r in 0..rows {
                codec::dequantize_row(
                    &codes[r * cols..][..cols],
                    &scales[r * (cols / block) * 2..][..(cols / block) * 2],
                    block,
                    &mut row,
                );
                let f: f32 = row.iter().zip(&xd).map(|(a, b)| a * b).sum();
                assert!((f - want[r]).abs() <= 1e-4 * (1.0 + f.abs()));
            }
            let xs: Vec<Vec<f32>> = (0..6).map(|_| rng.vec(cols, 2.0)).collect();
            let acts: Vec<QuantActs> = xs
                .iter()
                .map(|x| {
                    let mut a = QuantActs::default();
                    a.quantize(crate::Cpu::detect(), x, block, 0);
                    a
                })
                .collect();
            for isa in crate::available() {
                // Several tokens at once against the twin, token by token.
                let mut got = vec![0.0; 6 * (rows - 1)];
                dot_rows_tokens(isa, &w, 1, rows - 1, &acts, &mut got);
                for (t, a) in acts.iter().enumerate() {
                    let mut e = vec![0.0; rows - 1];
                    dot_rows_scalar(&w, 1, a, &mut e);
                    for (g, e) in got[t * (rows - 1)..(t + 1) * (rows - 1)].iter().zip(&e) {
                        assert!(
                            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{isa:?} block {block} batched"
                        );
                    }
                }
                let mut got = vec![0.0; rows - 1];
                dot_rows(isa, &w, 1, &a, &mut got);
                for (g, e) in got.iter().zip(&want[1..]) {
                    assert!(
                        (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "{isa:?} block {block}: {g} {e}"
                    );
                }
            }
        }
    }
}
