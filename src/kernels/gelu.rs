//! Gemma's gate, `gelu_tanh(g) · u` (transformers' `gelu_pytorch_tanh`), written as
//! `g · σ(2v) · u` with `v = √(2/π)(g + 0.044715 g³)`: `½(1 + tanh v) = 1 / (1 + e^{−2v})`.
//! With the vector `exp` of the attention kernels it costs what SiLU costs; libm's `tanhf`
//! was 13 % of a Gemma 3 prefill.

use super::attn::exp;
use super::{Cpu, Isa};

/// √(2/π).
pub(crate) const K: f32 = 0.797_884_6;
/// The cubic term's coefficient.
pub(crate) const C: f32 = 0.044715;

/// `gate[i] = gelu_tanh(gate[i]) · up[i]` with the best kernel `cpu` has.
pub fn gelu_tanh_mul(cpu: Cpu, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F and FMA; the lengths were checked above.
            return unsafe { super::x86::avx512::gelu::gelu_tanh_mul(gate, up) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: as above, AVX2 and FMA.
            return unsafe { super::x86::avx2::gelu::gelu_tanh_mul(gate, up) };
        }
    }
    let _ = cpu;
    gelu_tanh_mul_scalar(gate, up)
}

/// The scalar twin.
pub fn gelu_tanh_mul_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let v = K * (x + C * x * x * x);
        *g = x / (1.0 + exp(-2.0 * v)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    #[test]
    fn every_isa_matches_the_scalar_twin_and_the_tanh_form() {
        let mut rng = Rng(13);
        for n in [0, 1, 7, 15, 16, 17, 33, 2048 + 5] {
            let mut g = rng.vec(n, 8.0);
            // Saturating inputs: e^{−2v} overflows or underflows.
            if n > 3 {
                g[0] = -100.0;
                g[1] = 100.0;
                g[2] = 0.0;
            }
            let u = rng.vec(n, 3.0);
            let mut want = g.clone();
            gelu_tanh_mul_scalar(&mut want, &u);
            for (i, (&w, (&x, &ui))) in want.iter().zip(g.iter().zip(&u)).enumerate() {
                let tanh = 0.5 * x * (1.0 + (K * (x + C * x * x * x)).tanh()) * ui;
                assert!(
                    (w - tanh).abs() <= 2e-6 * tanh.abs().max(1.0),
                    "n={n} i={i}: {w} vs {tanh}"
                );
            }
            for cpu in crate::kernels::available() {
                let mut got = g.clone();
                gelu_tanh_mul(cpu, &mut got, &u);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                        "{cpu:?} n={n} i={i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
