//! The gate activations times `up` (see `kernels::gate`), 8 lanes at a time; the tail goes to
//! the scalar twin.

use super::attn::exp;
use crate::gate::{self, Gate, C, K};
use std::arch::x86_64::*;

/// `GELU`: Gemma's tanh GELU, else SiLU.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `gate.len() == up.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gate_mul<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    let n = gate.len() / 8 * 8;
    let (one, k2, c) = (
        _mm256_set1_ps(1.0),
        _mm256_set1_ps(-2.0 * K),
        _mm256_set1_ps(C),
    );
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        let g = _mm256_loadu_ps(gate.as_ptr().add(i));
        let u = _mm256_loadu_ps(up.as_ptr().add(i));
        let a = if GELU {
            let c1 = _mm256_fmadd_ps(c, _mm256_mul_ps(g, g), one);
            _mm256_mul_ps(_mm256_mul_ps(k2, g), c1)
        } else {
            _mm256_sub_ps(_mm256_setzero_ps(), g)
        };
        let s = _mm256_div_ps(g, _mm256_add_ps(one, exp(a)));
        _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(s, u));
    }
    let act = if GELU { Gate::GeluTanh } else { Gate::Silu };
    gate::gate_mul_scalar(act, &mut gate[n..], &up[n..]);
}
