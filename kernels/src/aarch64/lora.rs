//! The LoRA product's dot and scaled add (see `kernels::lora`) with NEON, 4 lanes; the tail
//! goes to the scalar twin.

use super::{f16_hi, f16_lo};
use crate::lora::{axpy_f16_scalar, axpy_scalar, dot_f16_scalar, dot_scalar};
use std::arch::aarch64::*;

/// # Safety
/// `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len() / 4 * 4;
    let mut acc = vdupq_n_f32(0.0);
    for i in (0..n).step_by(4) {
        // SAFETY: i + 4 ≤ n ≤ both lengths.
        acc = vfmaq_f32(
            acc,
            vld1q_f32(a.as_ptr().add(i)),
            vld1q_f32(b.as_ptr().add(i)),
        );
    }
    vaddvq_f32(acc) + dot_scalar(&a[n..], &b[n..])
}

/// # Safety
/// `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len() / 4 * 4;
    let s = vdupq_n_f32(alpha);
    for i in (0..n).step_by(4) {
        // SAFETY: i + 4 ≤ n ≤ both lengths.
        let yv = vld1q_f32(y.as_ptr().add(i));
        vst1q_f32(
            y.as_mut_ptr().add(i),
            vfmaq_f32(yv, s, vld1q_f32(x.as_ptr().add(i))),
        );
    }
    axpy_scalar(&mut y[n..], alpha, &x[n..]);
}

/// [`dot`] with `a` as f16 bits (an adapter factor kept in f16), widened with `fcvtl`.
///
/// # Safety
/// `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_f16(a: &[u16], b: &[f32]) -> f32 {
    let n = a.len() / 8 * 8;
    let (mut lo, mut hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let h = vld1q_u16(a.as_ptr().add(i));
        lo = vfmaq_f32(lo, f16_lo(h), vld1q_f32(b.as_ptr().add(i)));
        hi = vfmaq_f32(hi, f16_hi(h), vld1q_f32(b.as_ptr().add(i + 4)));
    }
    vaddvq_f32(vaddq_f32(lo, hi)) + dot_f16_scalar(&a[n..], &b[n..])
}

/// [`axpy`] with `x` as f16 bits.
///
/// # Safety
/// `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn axpy_f16(y: &mut [f32], alpha: f32, x: &[u16]) {
    let n = y.len() / 8 * 8;
    let s = vdupq_n_f32(alpha);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let h = vld1q_u16(x.as_ptr().add(i));
        let (y0, y1) = (y.as_mut_ptr().add(i), y.as_mut_ptr().add(i + 4));
        vst1q_f32(y0, vfmaq_f32(vld1q_f32(y0), s, f16_lo(h)));
        vst1q_f32(y1, vfmaq_f32(vld1q_f32(y1), s, f16_hi(h)));
    }
    axpy_f16_scalar(&mut y[n..], alpha, &x[n..]);
}
