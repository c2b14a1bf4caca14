//! The LoRA product's dot and scaled add (see `kernels::lora`) with NEON, 4 lanes; the tail
//! goes to the scalar twin.

use crate::kernels::lora::{axpy_scalar, dot_scalar};
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
