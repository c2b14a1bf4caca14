//! Q8 × int8 rows with AVX2: `vpmaddubsw` needs an unsigned operand, so it multiplies |w| by
//! x·sign(w) (pair sums fit i16: 2·128·127).

use super::q4::hsum;
use crate::act::QuantActs;
use crate::q8::Q8Matrix;
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2, FMA and F16C. `w.block % 32 == 0`, buffers checked by
/// `Q8Matrix::check`; `a` quantized with the same block; `first + y.len() <= rows`.
#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn dot_rows(w: &Q8Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    let ones = _mm256_set1_epi16(1);
    for (i, out) in y.iter_mut().enumerate() {
        let r = first + i;
        let codes = w.codes.as_ptr().add(r * cols);
        let x = a.q.as_ptr();
        let mut acc = _mm256_setzero_ps();
        for b in 0..cols / block {
            let mut d = _mm256_setzero_si256();
            for c in (b * block..(b + 1) * block).step_by(32) {
                // SAFETY: 32 codes and activations inside the row (block % 32 == 0).
                let wv = _mm256_loadu_si256(codes.add(c) as *const _);
                let xv = _mm256_loadu_si256(x.add(c) as *const _);
                let p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
                d = _mm256_add_epi32(d, _mm256_madd_epi16(p, ones));
            }
            let s = w.scale(r, b) * a.scale[b];
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(s), acc);
        }
        *out = hsum(acc);
    }
}
