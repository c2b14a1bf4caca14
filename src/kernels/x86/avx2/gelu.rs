//! `gelu_tanh(g) · u = g · σ(2v) · u` (see `kernels::gelu`), 8 lanes at a time; the tail goes
//! to the scalar twin.

use super::attn::exp;
use crate::kernels::gelu::{C, K};
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2 and FMA; `gate.len() == up.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len() / 8 * 8;
    let (one, k2, c) = (
        _mm256_set1_ps(1.0),
        _mm256_set1_ps(-2.0 * K),
        _mm256_set1_ps(C),
    );
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let x = _mm256_loadu_ps(gate.as_ptr().add(i));
        let u = _mm256_loadu_ps(up.as_ptr().add(i));
        let x2 = _mm256_mul_ps(x, x);
        let arg = _mm256_mul_ps(_mm256_mul_ps(k2, x), _mm256_fmadd_ps(c, x2, one));
        let s = _mm256_div_ps(x, _mm256_add_ps(one, exp(arg)));
        _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(s, u));
    }
    crate::kernels::gelu::gelu_tanh_mul_scalar(&mut gate[n..], &up[n..]);
}
