//! The LoRA product's dot and scaled add (see `kernels::lora`), 16 lanes, masked tail.

use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F; `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let x = _mm512_maskz_loadu_ps(m, a.as_ptr().add(i));
        let y = _mm512_maskz_loadu_ps(m, b.as_ptr().add(i));
        acc = _mm512_fmadd_ps(x, y, acc);
        i += 16;
    }
    _mm512_reduce_add_ps(acc)
}

/// # Safety
/// The CPU must support AVX-512 F; `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len();
    let s = _mm512_set1_ps(alpha);
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let xv = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
        let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, _mm512_fmadd_ps(s, xv, yv));
        i += 16;
    }
}
