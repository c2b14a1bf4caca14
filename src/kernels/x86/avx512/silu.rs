//! `silu(g) · u`, 16 lanes at a time, masked tail.

use super::attn::exp;
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F and FMA; `gate.len() == up.len()` (checked by the caller).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len();
    let one = _mm512_set1_ps(1.0);
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let g = _mm512_maskz_loadu_ps(m, gate.as_ptr().add(i));
        let u = _mm512_maskz_loadu_ps(m, up.as_ptr().add(i));
        let e = exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
        let s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(gate.as_mut_ptr().add(i), m, _mm512_mul_ps(s, u));
        i += 16;
    }
}
