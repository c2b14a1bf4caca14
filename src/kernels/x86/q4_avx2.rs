//! Q4 × int8 rows with AVX2: 32 code bytes (64 weights) per step; `vpmaddubsw` of the nibbles
//! against the even and odd activations (pair sums fit i16: 2·15·127), widened by `vpmaddwd`.

use crate::kernels::act::QuantActs;
use crate::kernels::q4::Q4Matrix;
use half::f16;
use std::arch::x86_64::*;

/// Horizontal sum of 8 floats.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

/// Per-block `s·sx` into `cs` (length ≥ nb + 16); returns `Σ_b (z_b − 8·s_b)·sx_b·Σxq_b`.
#[inline]
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn block_scales(w: &Q4Matrix, r: usize, a: &QuantActs, cs: &mut [f32]) -> f32 {
    let nb = w.cols / w.block;
    let pb = if w.sym { 2 } else { 4 };
    let params = w.params.as_ptr().add(r * nb * pb);
    let split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    let eight = _mm256_set1_ps(8.0);
    let mut corr = _mm256_setzero_ps();
    let mut b = 0;
    while b + 8 <= nb {
        let (z, s) = if w.sym {
            // SAFETY: 8 scales of this row (b + 8 <= nb).
            let raw = _mm_loadu_si128(params.add(b * 2) as *const _);
            (_mm256_setzero_ps(), _mm256_cvtph_ps(raw))
        } else {
            // SAFETY: 8 (zero, scale) pairs of this row.
            let lo = _mm256_cvtph_ps(_mm_loadu_si128(params.add(b * 4) as *const _));
            let hi = _mm256_cvtph_ps(_mm_loadu_si128(params.add(b * 4 + 16) as *const _));
            let (lo, hi) = (
                _mm256_permutevar8x32_ps(lo, split),
                _mm256_permutevar8x32_ps(hi, split),
            );
            (
                _mm256_permute2f128_ps::<0x20>(lo, hi),
                _mm256_permute2f128_ps::<0x31>(lo, hi),
            )
        };
        let sx = _mm256_loadu_ps(a.scale.as_ptr().add(b));
        let xs = _mm256_loadu_ps(a.scaled_sum.as_ptr().add(b));
        _mm256_storeu_ps(cs.as_mut_ptr().add(b), _mm256_mul_ps(s, sx));
        corr = _mm256_fmadd_ps(_mm256_fnmadd_ps(eight, s, z), xs, corr);
        b += 8;
    }
    let mut total = hsum(corr);
    // The last blocks one by one (fewer than 8).
    for b in b..nb {
        let p = std::slice::from_raw_parts(params.add(b * pb), pb);
        let (z, s) = if w.sym {
            (0.0, f16::from_le_bytes([p[0], p[1]]).to_f32())
        } else {
            (
                f16::from_le_bytes([p[0], p[1]]).to_f32(),
                f16::from_le_bytes([p[2], p[3]]).to_f32(),
            )
        };
        cs[b] = s * a.scale[b];
        total += (z - 8.0 * s) * a.scaled_sum[b];
    }
    total
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C. `w` has `cols % 64 == 0` and buffers checked by
/// `Q4Matrix::check`; `a` was quantized with the same block and chunk 64;
/// `first + y.len() <= w.rows`.
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn dot_rows(w: &Q4Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    let nb = cols / block;
    let mut cs = vec![0.0f32; nb + 16];
    let mut idx = [0i32; 8];
    for (k, v) in idx.iter_mut().enumerate() {
        *v = (8 * k / block) as i32;
    }
    let idx = _mm256_loadu_si256(idx.as_ptr() as *const _);
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let perm = a.perm.as_ptr();
    for (i, out) in y.iter_mut().enumerate() {
        let r = first + i;
        let corr = block_scales(w, r, a, &mut cs);
        let codes = w.codes.as_ptr().add(r * cols / 2);
        let mut acc = _mm256_setzero_ps();
        for c in 0..cols / 64 {
            // SAFETY: chunk c's 32 code bytes and 64 activations lie inside the row.
            let v = _mm256_loadu_si256(codes.add(c * 32) as *const _);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
            let lo = _mm256_and_si256(v, mask);
            let xe = _mm256_loadu_si256(perm.add(c * 64) as *const _);
            let xo = _mm256_loadu_si256(perm.add(c * 64 + 32) as *const _);
            let p = _mm256_add_epi16(_mm256_maddubs_epi16(hi, xe), _mm256_maddubs_epi16(lo, xo));
            let d = _mm256_madd_epi16(p, ones);
            let sc =
                _mm256_permutevar8x32_ps(_mm256_loadu_ps(cs.as_ptr().add(c * 64 / block)), idx);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc);
        }
        *out = hsum(acc) + corr;
    }
}
