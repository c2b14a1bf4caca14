//! Activation quantization with AVX-512: per block the absolute maximum, then `q = round(x /
//! scale)` with C's `roundf` rounding (half away from zero), saturated to int8, and the block's
//! sum. Bit-identical to the scalar twin in `kernels::act`.

use std::arch::x86_64::*;

/// Quantizes `x` (length a multiple of `block`, `block % 16 == 0`) into `q`, writing per
/// block `scale` and `scaled_sum`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW; `q.len() == x.len()`, `scale` and `scaled_sum` hold
/// `x.len() / block` entries.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn quantize(
    x: &[f32],
    block: usize,
    q: &mut [i8],
    scale: &mut [f32],
    scaled_sum: &mut [f32],
) {
    let half = _mm512_set1_ps(0.5);
    let one = _mm512_set1_ps(1.0);
    let lim = _mm512_set1_ps(127.0);
    for b in 0..x.len() / block {
        let xs = x.as_ptr().add(b * block);
        let mut m = _mm512_setzero_ps();
        for i in (0..block).step_by(16) {
            // SAFETY: i + 16 <= block inside this block of x.
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xs.add(i))));
        }
        let amax = _mm512_reduce_max_ps(m);
        let s = amax / 127.0;
        let inv = _mm512_set1_ps(if s > 0.0 { 1.0 / s } else { 0.0 });
        let mut sum = _mm512_setzero_si512();
        for i in (0..block).step_by(16) {
            let v = _mm512_mul_ps(_mm512_loadu_ps(xs.add(i)), inv);
            // roundf: truncate, then step away from zero when the dropped part is ≥ ½ (the
            // difference is exact, so ties go away from zero as in C).
            let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
            let frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
            let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, half);
            // ±1 with v's sign (integer ops: the `_ps` forms need AVX-512 DQ).
            let sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN));
            let away = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(one), sign));
            let r = _mm512_mask_add_ps(t, up, t, away);
            let r = _mm512_max_ps(
                _mm512_min_ps(r, lim),
                _mm512_sub_ps(_mm512_setzero_ps(), lim),
            );
            let ri = _mm512_cvtps_epi32(r);
            sum = _mm512_add_epi32(sum, ri);
            // SAFETY: 16 bytes of this block of q.
            _mm_storeu_si128(
                q.as_mut_ptr().add(b * block + i).cast(),
                _mm512_cvtepi32_epi8(ri),
            );
        }
        scale[b] = s;
        scaled_sum[b] = s * _mm512_reduce_add_epi32(sum) as f32;
    }
}

/// Each run of 8 values reordered as its 4 even-position values, then its 4 odd ones (the
/// activation order of the packed Q4 kernel).
///
/// # Safety
/// The CPU must support AVX-512 F/BW; `perm.len() == q.len()`, a multiple of 8.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn perm8(q: &[i8], perm: &mut [i8]) {
    let lane = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    let idx = _mm512_broadcast_i32x4(lane);
    let mut i = 0;
    while i < q.len() {
        let k = if q.len() - i >= 64 {
            !0u64
        } else {
            (1u64 << (q.len() - i)) - 1
        };
        // SAFETY: the mask keeps both accesses inside the slices.
        let v = _mm512_maskz_loadu_epi8(k, q.as_ptr().add(i));
        _mm512_mask_storeu_epi8(perm.as_mut_ptr().add(i), k, _mm512_shuffle_epi8(v, idx));
        i += 64;
    }
}
