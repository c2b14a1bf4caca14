//! The 16-row interleaved Q4 layout against f32 activations (W4A16): each code dword is
//! turned into 8 vectors of 16 rows' codes as f32 by a shift and a `vpermps` from a 16-entry
//! table (the permute reads only the index's low 4 bits, so no mask is needed), then one FMA
//! per column and token. The block's scale and zero point are applied once per block.

use super::q4p::{block_params, Group};
use crate::q4_packed::{PackedQ4, GROUP};
use std::arch::x86_64::*;

/// Tokens per pass over a group's weights.
const TOKENS: usize = 4;

/// # Safety
/// The CPU must support AVX-512 F/BW/VL, F16C and FMA; the arguments were checked by
/// `w4a16::dot_rows_f32` (row range in whole groups, `x`, `sums` and `out` sized for the
/// same number of tokens).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(crate) unsafe fn dot_rows(
    p: &PackedQ4,
    first: usize,
    count: usize,
    x: &[f32],
    sums: &[f32],
    out: &mut [f32],
) {
    let n = out.len() / count;
    for g in first / GROUP..(first + count) / GROUP {
        let mut t0 = 0;
        while t0 < n {
            let nt = TOKENS.min(n - t0);
            let job = Group {
                p,
                g,
                col: g * GROUP - first,
                count,
                t0,
            };
            match nt {
                1 => job.run_f32::<1, 4>(x, sums, out),
                2 => job.run_f32::<2, 2>(x, sums, out),
                3 => job.run_f32::<3, 2>(x, sums, out),
                _ => job.run_f32::<4, 2>(x, sums, out),
            }
            t0 += nt;
        }
    }
}

impl Group<'_> {
    /// `T` tokens of f32 activations, `C` f32 accumulators per token (independent FMA chains).
    ///
    /// # Safety
    /// As [`dot_rows`]; tokens `t0..t0 + T` exist.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
    unsafe fn run_f32<const T: usize, const C: usize>(
        &self,
        x: &[f32],
        sums: &[f32],
        out: &mut [f32],
    ) {
        let p = self.p;
        let (nb, rec, block, cols) = (p.blocks(), p.record(), p.block, p.cols);
        // Each 4-bit code's value: the code itself, or a non-uniform form's table entry.
        let values: [f32; 16] = std::array::from_fn(|c| p.form.int_value(c as u8) as f32);
        let lut = _mm512_loadu_ps(values.as_ptr());
        let base = p.data.as_ptr().add(self.g * nb * rec);
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..nb {
            let r = base.add(b * rec);
            let mut d = [[_mm512_setzero_ps(); C]; T];
            for i in 0..block / 8 {
                // SAFETY: code vector i of this record lies inside the group's data.
                let v = _mm512_loadu_si512(r.add(i * 64) as *const _);
                // Column j of the dword: byte j/2, high nibble first.
                let c = if p.form.hi_bits > 0 {
                    wide_codes(p, r, i, v)
                } else {
                    [
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(v), lut),
                        _mm512_permutexvar_ps(v, lut),
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<12>(v), lut),
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<8>(v), lut),
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<20>(v), lut),
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<16>(v), lut),
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<28>(v), lut),
                        _mm512_permutexvar_ps(_mm512_srli_epi32::<24>(v), lut),
                    ]
                };
                for (t, dt) in d.iter_mut().enumerate() {
                    // SAFETY: 8 values of token t0 + t inside x (checked by the caller).
                    let xp = x.as_ptr().add((self.t0 + t) * cols + b * block + i * 8);
                    for (j, cj) in c.iter().enumerate() {
                        let a = &mut dt[j % C];
                        *a = _mm512_fmadd_ps(*cj, _mm512_set1_ps(*xp.add(j)), *a);
                    }
                }
            }
            // SAFETY: the record ends with the 16 rows' parameters.
            let (s, m) = block_params(r.add(p.params_at()), p, p.form.offset as f32);
            for (t, dt) in d.iter().enumerate() {
                let mut dot = dt[0];
                for a in &dt[1..] {
                    dot = _mm512_add_ps(dot, *a);
                }
                acc[t] = _mm512_fmadd_ps(dot, s, acc[t]);
                let xs = _mm512_set1_ps(*sums.get_unchecked((self.t0 + t) * nb + b));
                acc[t] = _mm512_fmadd_ps(m, xs, acc[t]);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            // SAFETY: 16 outputs of token t0 + t inside `out` (checked by the caller).
            let o = out.as_mut_ptr().add((self.t0 + t) * self.count + self.col);
            _mm512_storeu_ps(o, *a);
        }
    }
}

/// The 8 columns of code vector `i` as f32 for codes wider than 4 bits: each nibble with its
/// high-bit planes' bits added (`q4_packed::Form`), then converted.
///
/// # Safety
/// The CPU must support AVX-512 F; `r` is a record of `p` and `v` its code vector `i`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn wide_codes(p: &PackedQ4, r: *const u8, i: usize, v: __m512i) -> [__m512; 8] {
    let vw = p.block / 8;
    let nibble = _mm512_set1_epi32(0xF);
    let mut c = [_mm512_setzero_ps(); 8];
    for (j, cj) in c.iter_mut().enumerate() {
        let (byte, h) = (j / 2, j % 2);
        let shift = 8 * byte as u32 + if h == 0 { 4 } else { 0 };
        let mut code = _mm512_and_si512(
            _mm512_srlv_epi32(v, _mm512_set1_epi32(shift as i32)),
            nibble,
        );
        for pl in 0..p.form.hi_bits as usize {
            let bit = pl * 2 * vw + 2 * i + h;
            // SAFETY: plane vector bit / 8 lies inside the record's high-bit planes.
            let plane = _mm512_loadu_si512(r.add((vw + bit / 8) * 64) as *const _);
            let at = _mm512_set1_epi32((8 * byte + bit % 8) as i32);
            let one = _mm512_and_si512(_mm512_srlv_epi32(plane, at), _mm512_set1_epi32(1));
            code = _mm512_or_si512(
                code,
                _mm512_slli_epi32::<4>(_mm512_sllv_epi32(one, _mm512_set1_epi32(pl as i32))),
            );
        }
        *cj = _mm512_cvtepi32_ps(code);
    }
    c
}
