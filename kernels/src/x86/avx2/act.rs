//! `kernels::act` with AVX2: activations quantized to int8 per block, bit-identical to the
//! scalar twin (the same max, scale and round-half-away-from-zero), 32 values at a time; and
//! the packed Q4 kernels' reordering of each 8 values.

use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2; `block % 32 == 0`, `q.len() == x.len()`, and `scale` and
/// `scaled_sum` hold `x.len() / block` entries.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantize(
    x: &[f32],
    block: usize,
    q: &mut [i8],
    scale: &mut [f32],
    scaled_sum: &mut [f32],
) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    let sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let (half, one, lim) = (
        _mm256_set1_ps(0.5),
        _mm256_set1_ps(1.0),
        _mm256_set1_ps(127.0),
    );
    // `packs` works within 128-bit lanes; this puts the four vectors' bytes back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for b in 0..x.len() / block {
        let xs = x.as_ptr().add(b * block);
        let mut m = _mm256_setzero_ps();
        for i in (0..block).step_by(8) {
            // SAFETY: i + 8 <= block inside this block of x.
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xs.add(i)), abs_mask));
        }
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        let amax = lanes.iter().fold(0.0f32, |a, &v| a.max(v));
        let s = amax / 127.0;
        let inv = _mm256_set1_ps(if s > 0.0 { 1.0 / s } else { 0.0 });
        let mut sum = _mm256_setzero_si256();
        for i in (0..block).step_by(32) {
            let mut ints = [_mm256_setzero_si256(); 4];
            for (k, r) in ints.iter_mut().enumerate() {
                // SAFETY: i + 32 <= block, so values i + 8k .. i + 8k + 8 are in this block.
                let v = _mm256_mul_ps(_mm256_loadu_ps(xs.add(i + 8 * k)), inv);
                // roundf: truncate, then step away from zero when the dropped part is ≥ ½.
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
                let frac = _mm256_and_ps(_mm256_sub_ps(v, t), abs_mask);
                let up = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, half);
                let away = _mm256_or_ps(one, _mm256_and_ps(v, sign_mask));
                let rv = _mm256_add_ps(t, _mm256_and_ps(up, away));
                let rv = _mm256_max_ps(
                    _mm256_min_ps(rv, lim),
                    _mm256_sub_ps(_mm256_setzero_ps(), lim),
                );
                *r = _mm256_cvtps_epi32(rv);
                sum = _mm256_add_epi32(sum, *r);
            }
            let words = _mm256_packs_epi16(
                _mm256_packs_epi32(ints[0], ints[1]),
                _mm256_packs_epi32(ints[2], ints[3]),
            );
            // SAFETY: 32 bytes of this block of q.
            _mm256_storeu_si256(
                q.as_mut_ptr().add(b * block + i).cast(),
                _mm256_permutevar8x32_epi32(words, order),
            );
        }
        let mut total = [0i32; 8];
        _mm256_storeu_si256(total.as_mut_ptr().cast(), sum);
        scale[b] = s;
        scaled_sum[b] = s * total.iter().sum::<i32>() as f32;
    }
}

/// Each run of 8 values reordered as its 4 even-position values, then its 4 odd ones.
///
/// # Safety
/// The CPU must support AVX2; `perm.len() == q.len()`, a multiple of 8.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn perm8(q: &[i8], perm: &mut [i8]) {
    let idx = _mm256_setr_epi8(
        0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12,
        14, 9, 11, 13, 15,
    );
    let whole = q.len() / 32 * 32;
    for i in (0..whole).step_by(32) {
        // SAFETY: i + 32 <= both lengths.
        let v = _mm256_loadu_si256(q.as_ptr().add(i).cast());
        _mm256_storeu_si256(perm.as_mut_ptr().add(i).cast(), _mm256_shuffle_epi8(v, idx));
    }
    for (src, dst) in q[whole..]
        .chunks_exact(8)
        .zip(perm[whole..].chunks_exact_mut(8))
    {
        for j in 0..4 {
            dst[j] = src[2 * j];
            dst[4 + j] = src[2 * j + 1];
        }
    }
}
