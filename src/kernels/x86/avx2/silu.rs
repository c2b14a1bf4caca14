//! `silu(g) · u`, 8 lanes at a time; the tail goes to the scalar twin.

use super::attn::exp;
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2 and FMA; `gate.len() == up.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len() / 8 * 8;
    let one = _mm256_set1_ps(1.0);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let g = _mm256_loadu_ps(gate.as_ptr().add(i));
        let u = _mm256_loadu_ps(up.as_ptr().add(i));
        let e = exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
        let s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(s, u));
    }
    crate::kernels::silu::silu_mul_scalar(&mut gate[n..], &up[n..]);
}
