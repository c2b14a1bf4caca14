//! RMSNorm with NEON: the sum of squares in 4 lanes × 4 chains, then the scaling 4 lanes at
//! a time (`w · (x · inv)`, the scalar twin's order of operations).

use std::arch::aarch64::*;

/// `1 / sqrt(mean(x²) + eps)`.
#[inline(always)]
unsafe fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let n = x.len();
    let whole = n / 16 * 16;
    let p = x.as_ptr();
    let mut s = [vdupq_n_f32(0.0); 4];
    for i in (0..whole).step_by(16) {
        for (j, a) in s.iter_mut().enumerate() {
            // SAFETY: i + 16 ≤ n.
            let v = vld1q_f32(p.add(i + 4 * j));
            *a = vfmaq_f32(*a, v, v);
        }
    }
    let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(s[0], s[1]), vaddq_f32(s[2], s[3])));
    for &v in &x[whole..] {
        sum += v * v;
    }
    1.0 / (sum / n as f32 + eps).sqrt()
}

/// # Safety
/// `x`, `w` and `out` have the same length (checked by `kernels::norm`).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let inv = inv_rms(x, eps);
    let n4 = x.len() / 4 * 4;
    for i in (0..n4).step_by(4) {
        // SAFETY: i + 4 ≤ n in all three slices.
        let v = vmulq_n_f32(vld1q_f32(x.as_ptr().add(i)), inv);
        vst1q_f32(
            out.as_mut_ptr().add(i),
            vmulq_f32(vld1q_f32(w.as_ptr().add(i)), v),
        );
    }
    for i in n4..x.len() {
        out[i] = w[i] * (x[i] * inv);
    }
}

/// # Safety
/// `x` and `w` have the same length (checked by `kernels::norm`).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let inv = inv_rms(x, eps);
    let n4 = x.len() / 4 * 4;
    for i in (0..n4).step_by(4) {
        // SAFETY: i + 4 ≤ n in both slices.
        let v = vmulq_n_f32(vld1q_f32(x.as_ptr().add(i)), inv);
        vst1q_f32(
            x.as_mut_ptr().add(i),
            vmulq_f32(vld1q_f32(w.as_ptr().add(i)), v),
        );
    }
    for i in n4..x.len() {
        x[i] = w[i] * (x[i] * inv);
    }
}
