//! Q4 × int8 rows with AVX-512 VNNI: 64 code bytes (128 weights) per step, `vpdpbusd` of the
//! high and low nibbles against the even and odd activations, one float scale per 8-lane group.

use crate::kernels::act::QuantActs;
use crate::kernels::q4::Q4Matrix;
use std::arch::x86_64::*;

/// Lane k of a 128-weight step covers weights 8k..8k+8: its block is `8k / block`.
unsafe fn lane_blocks(block: usize) -> (__m512i, __m256i) {
    let mut idx = [0i32; 16];
    for (k, v) in idx.iter_mut().enumerate() {
        *v = (8 * k / block) as i32;
    }
    // SAFETY: `idx` holds 16 i32 (64 bytes) and the first 8 (32 bytes).
    (
        _mm512_loadu_si512(idx.as_ptr() as *const _),
        _mm256_loadu_si256(idx.as_ptr() as *const _),
    )
}

/// Per-block combined scales `s·sx` into `cs` (length ≥ nb + 16) and returns
/// `Σ_b (z_b − 8·s_b)·sx_b·Σxq_b` for row `r`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn block_scales(w: &Q4Matrix, r: usize, a: &QuantActs, cs: &mut [f32]) -> f32 {
    let nb = w.cols / w.block;
    let pb = if w.sym { 2 } else { 4 };
    let params = w.params.as_ptr().add(r * nb * pb);
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let eight = _mm512_set1_ps(8.0);
    let mut corr = _mm512_setzero_ps();
    let mut b = 0;
    while b < nb {
        let k = ((1u32 << (nb - b).min(16)) - 1) as __mmask16;
        let (z, s) = if w.sym {
            // SAFETY: the mask limits the load to this row's remaining scales.
            let raw = _mm256_maskz_loadu_epi16(k, params.add(b * 2) as *const i16);
            (_mm512_setzero_ps(), _mm512_cvtph_ps(raw))
        } else {
            // SAFETY: as above, one 32-bit (zero, scale) pair per lane.
            let raw = _mm512_maskz_loadu_epi32(k, params.add(b * 4) as *const i32);
            let lo = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
            let hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(raw));
            (
                _mm512_permutex2var_ps(lo, even, hi),
                _mm512_permutex2var_ps(lo, odd, hi),
            )
        };
        // SAFETY: the activation arrays and `cs` are padded by 16 past the last block.
        let sx = _mm512_loadu_ps(a.scale.as_ptr().add(b));
        let xs = _mm512_loadu_ps(a.scaled_sum.as_ptr().add(b));
        _mm512_storeu_ps(cs.as_mut_ptr().add(b), _mm512_maskz_mul_ps(k, s, sx));
        corr = _mm512_mask3_fmadd_ps(_mm512_fnmadd_ps(eight, s, z), xs, corr, k);
        b += 16;
    }
    _mm512_reduce_add_ps(corr)
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C and FMA. `w` has `cols % 64 == 0` and
/// buffers checked by `Q4Matrix::check`; `a` was quantized with the same block and chunk 128;
/// `first + y.len() <= w.rows`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn dot_rows(w: &Q4Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    let nb = cols / block;
    let mut cs = vec![0.0f32; nb + 16];
    let (idx, idx8) = lane_blocks(block);
    let mask = _mm512_set1_epi8(0x0F);
    let mask8 = _mm256_set1_epi8(0x0F);
    let full = cols / 128;
    let perm = a.perm.as_ptr();
    for (i, out) in y.iter_mut().enumerate() {
        let r = first + i;
        let corr = block_scales(w, r, a, &mut cs);
        let codes = w.codes.as_ptr().add(r * cols / 2);
        let mut acc = _mm512_setzero_ps();
        for c in 0..full {
            // SAFETY: chunk c's 64 code bytes and 128 activations lie inside the row.
            let v = _mm512_loadu_si512(codes.add(c * 64) as *const _);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
            let lo = _mm512_and_si512(v, mask);
            let xe = _mm512_loadu_si512(perm.add(c * 128) as *const _);
            let xo = _mm512_loadu_si512(perm.add(c * 128 + 64) as *const _);
            let d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, xe);
            let d = _mm512_dpbusd_epi32(d, lo, xo);
            let sc = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(cs.as_ptr().add(c * 128 / block)));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc);
        }
        let mut total = _mm512_reduce_add_ps(acc) + corr;
        if cols % 128 != 0 {
            // The last 64 weights (32 code bytes, activations as [evens 32, odds 32]).
            let v = _mm256_loadu_si256(codes.add(full * 64) as *const _);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask8);
            let lo = _mm256_and_si256(v, mask8);
            let xe = _mm256_loadu_si256(perm.add(full * 128) as *const _);
            let xo = _mm256_loadu_si256(perm.add(full * 128 + 32) as *const _);
            let d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, xe);
            let d = _mm256_dpbusd_epi32(d, lo, xo);
            let sc =
                _mm256_permutexvar_ps(idx8, _mm256_loadu_ps(cs.as_ptr().add(full * 128 / block)));
            let p = _mm256_mul_ps(_mm256_cvtepi32_ps(d), sc);
            total += _mm512_reduce_add_ps(_mm512_zextps256_ps512(p));
        }
        *out = total;
    }
}
