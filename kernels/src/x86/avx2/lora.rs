//! The LoRA product's dot and scaled add (see `kernels::lora`), 8 lanes; the tail goes to the
//! scalar twin.

use crate::lora::{axpy_f16_scalar, axpy_scalar, dot_f16_scalar, dot_scalar};
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2 and FMA; `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len() / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        acc = _mm256_fmadd_ps(
            _mm256_loadu_ps(a.as_ptr().add(i)),
            _mm256_loadu_ps(b.as_ptr().add(i)),
            acc,
        );
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    lanes.iter().sum::<f32>() + dot_scalar(&a[n..], &b[n..])
}

/// # Safety
/// The CPU must support AVX2 and FMA; `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len() / 8 * 8;
    let s = _mm256_set1_ps(alpha);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let yv = _mm256_loadu_ps(y.as_ptr().add(i));
        let xv = _mm256_loadu_ps(x.as_ptr().add(i));
        _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_fmadd_ps(s, xv, yv));
    }
    axpy_scalar(&mut y[n..], alpha, &x[n..]);
}

/// [`dot`] with `a` as f16 bits (an adapter factor kept in f16), widened with F16C.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16(a: &[u16], b: &[f32]) -> f32 {
    let n = a.len() / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        acc = _mm256_fmadd_ps(
            _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i).cast())),
            _mm256_loadu_ps(b.as_ptr().add(i)),
            acc,
        );
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    lanes.iter().sum::<f32>() + dot_f16_scalar(&a[n..], &b[n..])
}

/// [`axpy`] with `x` as f16 bits.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn axpy_f16(y: &mut [f32], alpha: f32, x: &[u16]) {
    let n = y.len() / 8 * 8;
    let s = _mm256_set1_ps(alpha);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let yv = _mm256_loadu_ps(y.as_ptr().add(i));
        let xv = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i).cast()));
        _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_fmadd_ps(s, xv, yv));
    }
    axpy_f16_scalar(&mut y[n..], alpha, &x[n..]);
}
