//! The MLP's gate activation times `up`, one family for both: `g / (1 + e^{a(g)}) · u`.
//! - SwiGLU: `silu(g) · u = g·σ(g) · u`, so `a(g) = −g`.
//! - Gemma's `gelu_tanh(g) · u` (transformers' `gelu_pytorch_tanh`) is `g·σ(2v) · u`, because
//!   `½(1 + tanh v) = 1 / (1 + e^{−2v})`, with `v = √(2/π)(g + 0.044715 g³)`: so
//!   `a(g) = −2√(2/π)·g·(1 + 0.044715 g²)`.
//!
//! The vector `exp` is the attention kernels'. In prefill this runs over every token's MLP row,
//! where libm's `expf` was 3 % of the time (SiLU) and `tanhf` 13 % (Gemma).

use super::attn::exp;
use super::{Cpu, Isa};

/// √(2/π).
pub(crate) const K: f32 = 0.797_884_6;
/// GELU's cubic coefficient.
pub(crate) const C: f32 = 0.044715;

/// Which gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Silu,
    GeluTanh,
}

/// `gate[i] = act(gate[i]) · up[i]` with the best kernel `cpu` has.
pub fn gate_mul(cpu: Cpu, act: Gate, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    #[cfg(target_arch = "x86_64")]
    {
        use super::x86::{avx2, avx512};
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F and FMA; the lengths were checked above.
            return unsafe {
                match act {
                    Gate::Silu => avx512::gate::gate_mul::<false>(gate, up),
                    Gate::GeluTanh => avx512::gate::gate_mul::<true>(gate, up),
                }
            };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: as above, AVX2 and FMA.
            return unsafe {
                match act {
                    Gate::Silu => avx2::gate::gate_mul::<false>(gate, up),
                    Gate::GeluTanh => avx2::gate::gate_mul::<true>(gate, up),
                }
            };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the lengths were checked above.
        return unsafe {
            match act {
                Gate::Silu => super::aarch64::gate::gate_mul::<false>(gate, up),
                Gate::GeluTanh => super::aarch64::gate::gate_mul::<true>(gate, up),
            }
        };
    }
    let _ = cpu;
    gate_mul_scalar(act, gate, up)
}

/// The scalar twin.
pub fn gate_mul_scalar(act: Gate, gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let a = match act {
            Gate::Silu => -x,
            Gate::GeluTanh => -2.0 * (K * (x + C * x * x * x)),
        };
        *g = x / (1.0 + exp(a)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// The textbook form each gate must stay close to (libm's exp and tanh).
    fn libm(act: Gate, x: f32, u: f32) -> f32 {
        match act {
            Gate::Silu => x / (1.0 + (-x).exp()) * u,
            Gate::GeluTanh => 0.5 * x * (1.0 + (K * (x + C * x * x * x)).tanh()) * u,
        }
    }

    #[test]
    fn every_isa_matches_the_scalar_twin_and_libm() {
        let mut rng = Rng(11);
        for act in [Gate::Silu, Gate::GeluTanh] {
            for n in [0, 1, 7, 15, 16, 17, 33, 2560 + 5] {
                let mut g = rng.vec(n, 12.0);
                // Saturating inputs: the exponential overflows or underflows.
                if n > 3 {
                    g[0] = -100.0;
                    g[1] = 100.0;
                    g[2] = 0.0;
                }
                let u = rng.vec(n, 3.0);
                let mut want = g.clone();
                gate_mul_scalar(act, &mut want, &u);
                for (i, (&w, (&x, &ui))) in want.iter().zip(g.iter().zip(&u)).enumerate() {
                    let r = libm(act, x, ui);
                    assert!(
                        (w - r).abs() <= 2e-6 * r.abs().max(1.0),
                        "{act:?} n={n} i={i}: {w} vs {r}"
                    );
                }
                for cpu in crate::available() {
                    let mut got = g.clone();
                    gate_mul(cpu, act, &mut got, &u);
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                            "{act:?} {cpu:?} n={n} i={i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}
