//! SwiGLU's gate, `silu(g) · u = g / (1 + e^−g) · u`, with the vector `exp` of the attention
//! kernels: in prefill it runs over every token's 2,560-wide (or wider) MLP row, where libm's
//! scalar `expf` alone was 3 % of the time.

use super::attn::exp;
use super::{Cpu, Isa};

/// `gate[i] = silu(gate[i]) · up[i]` with the best kernel for `isa`.
pub fn silu_mul(cpu: Cpu, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves the CPU has (AVX-512 F, FMA); the
            // lengths were checked above.
            return unsafe { super::x86::avx512::silu::silu_mul(gate, up) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: as above, AVX2 and FMA.
            return unsafe { super::x86::avx2::silu::silu_mul(gate, up) };
        }
    }
    let _ = cpu;
    silu_mul_scalar(gate, up)
}

/// The scalar twin.
pub fn silu_mul_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    #[test]
    fn every_isa_matches_the_scalar_twin_and_libm() {
        let mut rng = Rng(11);
        for n in [0, 1, 7, 15, 16, 17, 33, 2560 + 5] {
            let mut g = rng.vec(n, 12.0);
            // Saturating inputs: e^−g overflows or underflows.
            if n > 3 {
                g[0] = -100.0;
                g[1] = 100.0;
                g[2] = 0.0;
            }
            let u = rng.vec(n, 3.0);
            let mut want = g.clone();
            silu_mul_scalar(&mut want, &u);
            for (i, (&w, (&gi, &ui))) in want.iter().zip(g.iter().zip(&u)).enumerate() {
                let libm = gi / (1.0 + (-gi).exp()) * ui;
                assert!(
                    (w - libm).abs() <= 1e-6 * libm.abs().max(1.0),
                    "n={n} i={i}"
                );
            }
            for isa in crate::kernels::available() {
                let mut got = g.clone();
                silu_mul(isa, &mut got, &u);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                        "{isa:?} n={n} i={i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
