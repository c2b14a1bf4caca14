//! The gate activations times `up` (see `kernels::gate`), 16 lanes at a time, masked tail.

use super::attn::exp;
use crate::gate::{C, K};
use std::arch::x86_64::*;

/// `GELU`: Gemma's tanh GELU, else SiLU.
///
/// # Safety
/// The CPU must support AVX-512 F and FMA; `gate.len() == up.len()` (checked by the caller).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn gate_mul<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    let n = gate.len();
    let (one, k2, c) = (
        _mm512_set1_ps(1.0),
        _mm512_set1_ps(-2.0 * K),
        _mm512_set1_ps(C),
    );
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
        let a = if GELU {
            let c1 = _mm512_fmadd_ps(c, _mm512_mul_ps(g, g), one);
            _mm512_mul_ps(_mm512_mul_ps(k2, g), c1)
        } else {
            _mm512_sub_ps(_mm512_setzero_ps(), g)
        };
        let s = _mm512_div_ps(g, _mm512_add_ps(one, exp(a)));
        _mm512_mask_storeu_ps(gate.as_mut_ptr().add(i), m, _mm512_mul_ps(s, u));
        i += 16;
    }
}
