//! The gate activations times `up` (see `kernels::gate`) with NEON, 4 lanes at a time; the
//! tail goes to the scalar twin.

use super::exp;
use crate::gate::{self, Gate, C, K};
use std::arch::aarch64::*;

/// `GELU`: Gemma's tanh GELU, else SiLU.
///
/// # Safety
/// `gate.len() == up.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn gate_mul<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    let n = gate.len() / 4 * 4;
    let (one, k2, c) = (vdupq_n_f32(1.0), vdupq_n_f32(-2.0 * K), vdupq_n_f32(C));
    for i in (0..n).step_by(4) {
        // SAFETY: i + 4 ≤ n ≤ both lengths.
        let g = vld1q_f32(gate.as_ptr().add(i));
        let u = vld1q_f32(up.as_ptr().add(i));
        let a = if GELU {
            let c1 = vfmaq_f32(one, c, vmulq_f32(g, g));
            vmulq_f32(vmulq_f32(k2, g), c1)
        } else {
            vnegq_f32(g)
        };
        let s = vdivq_f32(g, vaddq_f32(one, exp(a)));
        vst1q_f32(gate.as_mut_ptr().add(i), vmulq_f32(s, u));
    }
    let act = if GELU { Gate::GeluTanh } else { Gate::Silu };
    gate::gate_mul_scalar(act, &mut gate[n..], &up[n..]);
}
