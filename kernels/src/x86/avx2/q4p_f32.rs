//! The 16-row interleaved Q4 layout against f32 activations (W4A16) with AVX2: as the AVX-512
//! version (`q4p_f32_avx512`), one 256-bit half of each code vector (8 rows) at a time. A code
//! nibble becomes f32 by a shift, a mask and a convert (AVX2 has no 16-entry float permute),
//! then one FMA per column and token; the block's scale and zero point are applied once per
//! block.

use super::q4p::{by_form, each_half, Half};
use crate::q4_packed::PackedQ4;
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2, FMA and F16C; the arguments were checked by
/// `w4a16::dot_rows_f32` (row range in whole groups, `x`, `sums` and `out` sized for the
/// same number of tokens).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows(
    p: &PackedQ4,
    first: usize,
    count: usize,
    x: &[f32],
    sums: &[f32],
    out: &mut [f32],
) {
    each_half(p, first, count, out.len() / count, |job, nt| {
        // SAFETY: as this function's (the same CPU features; the job's rows and tokens exist).
        unsafe {
            match nt {
                1 => job.run_f32::<1>(x, sums, out),
                2 => job.run_f32::<2>(x, sums, out),
                3 => job.run_f32::<3>(x, sums, out),
                _ => job.run_f32::<4>(x, sums, out),
            }
        }
    });
}

impl Half<'_> {
    /// Picks the loop made for this matrix's form, as the int8 kernel does (`Half::run_form`):
    /// the high-bit planes (`HI`), code vectors per block (`VW`) and a value table (`TBL`) are
    /// constants, so each plane bit's place is an immediate shift, not a count and a load per
    /// code.
    ///
    /// # Safety
    /// As [`dot_rows`]; tokens `t0..t0 + T` exist.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_f32<const T: usize>(&self, x: &[f32], sums: &[f32], out: &mut [f32]) {
        // SAFETY: as this function's; `by_form!` passes the matrix's form as the constants.
        by_form!(self, run_f32_form::<T>, (x, sums, out))
    }

    /// # Safety
    /// As [`dot_rows`]; tokens `t0..t0 + T` exist; `HI`, `VW` (= block / 8) and `TBL` are
    /// the matrix's form.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_f32_form<const T: usize, const HI: usize, const VW: usize, const TBL: bool>(
        &self,
        x: &[f32],
        sums: &[f32],
        out: &mut [f32],
    ) {
        let p = self.p;
        let (nb, rec, block, cols) = (p.blocks(), p.record(), p.block, p.cols);
        debug_assert!(p.form.hi_bits as usize == HI && block == VW * 8);
        let nibble = _mm256_set1_epi32(0xF);
        let table = match p.form.table {
            Some(t) if TBL => {
                let v: [f32; 16] = t.map(|v| v as f32);
                // SAFETY: `v` holds 16 floats.
                (
                    _mm256_loadu_ps(v.as_ptr()),
                    _mm256_loadu_ps(v.as_ptr().add(8)),
                )
            }
            _ => (_mm256_setzero_ps(), _mm256_setzero_ps()),
        };
        let base = p.data.as_ptr().add(self.g * nb * rec);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let r = base.add(b * rec);
            // This half of the block's plane vectors (HI·VW/4 of them: at most 2), once.
            let mut planes = [_mm256_setzero_si256(); 2];
            for (k, pl) in planes.iter_mut().enumerate().take((HI * VW).div_ceil(4)) {
                // SAFETY: plane vector k of this record, after its VW code vectors.
                *pl = _mm256_loadu_si256(r.add((VW + k) * 64 + self.half * 32) as *const _);
            }
            // Two accumulators per token: even and odd columns, independent FMA chains.
            let mut d = [[_mm256_setzero_ps(); 2]; T];
            for i in 0..VW {
                // SAFETY: half `half` of code vector i of this record lies inside the group.
                let v = _mm256_loadu_si256(r.add(i * 64 + self.half * 32) as *const _);
                let code = |shift: i32| {
                    let mut c =
                        _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(shift)), nibble);
                    // Codes wider than 4 bits: this column's bit of each plane, moved to bit
                    // 4 + pl (every count is a constant once the loops unroll).
                    let (byte, h) = ((shift / 8) as usize, usize::from(shift % 8 == 0));
                    for pl in 0..HI {
                        let bit = pl * 2 * VW + 2 * i + h;
                        let (from, to) = ((8 * byte + bit % 8) as i32, 4 + pl as i32);
                        let plane = planes[bit / 8];
                        let moved = if from >= to {
                            _mm256_srl_epi32(plane, _mm_cvtsi32_si128(from - to))
                        } else {
                            _mm256_sll_epi32(plane, _mm_cvtsi32_si128(to - from))
                        };
                        c = _mm256_or_si256(c, _mm256_and_si256(moved, _mm256_set1_epi32(1 << to)));
                    }
                    if TBL {
                        // A non-uniform form: entries 0–7 or 8–15, chosen by the code's bit 3.
                        _mm256_blendv_ps(
                            _mm256_permutevar8x32_ps(table.0, c),
                            _mm256_permutevar8x32_ps(table.1, c),
                            _mm256_castsi256_ps(_mm256_slli_epi32::<28>(c)),
                        )
                    } else {
                        _mm256_cvtepi32_ps(c)
                    }
                };
                // Column j of the dword: byte j/2, high nibble first.
                let c = [
                    code(4),
                    code(0),
                    code(12),
                    code(8),
                    code(20),
                    code(16),
                    code(28),
                    code(24),
                ];
                for (t, dt) in d.iter_mut().enumerate() {
                    // SAFETY: 8 values of token t0 + t inside x (checked by the caller).
                    let xp = x.as_ptr().add((self.t0 + t) * cols + b * block + i * 8);
                    for (j, cj) in c.iter().enumerate() {
                        let a = &mut dt[j % 2];
                        *a = _mm256_fmadd_ps(*cj, _mm256_set1_ps(*xp.add(j)), *a);
                    }
                }
            }
            let (s, m) = self.params(r);
            for (t, dt) in d.iter().enumerate() {
                let dot = _mm256_add_ps(dt[0], dt[1]);
                acc[t] = _mm256_fmadd_ps(dot, s, acc[t]);
                let xs = _mm256_set1_ps(*sums.get_unchecked((self.t0 + t) * nb + b));
                acc[t] = _mm256_fmadd_ps(m, xs, acc[t]);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            // SAFETY: 8 outputs of token t0 + t inside `out` (checked by the caller).
            let o = out.as_mut_ptr().add((self.t0 + t) * self.count + self.col);
            _mm256_storeu_ps(o, *a);
        }
    }
}
