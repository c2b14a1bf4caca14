//! Q8 × int8 rows with AVX-512 VNNI. `vpdpbusd` multiplies unsigned by signed bytes, so the
//! weights are offset to `q + 128` (a sign-bit flip) and `128·Σxq` is taken back per block.

use crate::kernels::act::QuantActs;
use crate::kernels::q8::Q8Matrix;
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C and FMA. `w.block % 64 == 0`, buffers
/// checked by `Q8Matrix::check`; `a` quantized with the same block; `first + y.len() <= rows`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn dot_rows(w: &Q8Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    let flip = _mm512_set1_epi8(-128);
    for (i, out) in y.iter_mut().enumerate() {
        let r = first + i;
        let codes = w.codes.as_ptr().add(r * cols);
        let x = a.q.as_ptr();
        let mut acc = _mm512_setzero_ps();
        let mut corr = 0.0f32;
        for b in 0..cols / block {
            let mut d = _mm512_setzero_si512();
            for c in (b * block..(b + 1) * block).step_by(64) {
                // SAFETY: 64 codes and activations inside the row (block % 64 == 0).
                let wv = _mm512_xor_si512(_mm512_loadu_si512(codes.add(c) as *const _), flip);
                d = _mm512_dpbusd_epi32(d, wv, _mm512_loadu_si512(x.add(c) as *const _));
            }
            let s = w.scale(r, b) * a.scale[b];
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(s), acc);
            corr += w.scale(r, b) * 128.0 * a.scaled_sum[b];
        }
        *out = _mm512_reduce_add_ps(acc) - corr;
    }
}
