//! RMSNorm, dispatched: the scalar definitions are `scalar::rms_norm` / `scalar::rms_norm_in_place`
//! (an in-order f32 sum, as transformers). aarch64 has a NEON version (its sum of squares in
//! 16 lanes, so it differs from the twin by f32 rounding only). x86 keeps the scalar twin: a
//! norm is under 0.1 % of a decode step there, and the x86 refactor guard pins its bits.

use super::Cpu;
#[cfg(target_arch = "aarch64")]
use super::Isa;

/// `out = w · x / sqrt(mean(x²) + eps)`.
pub fn rms_norm(cpu: Cpu, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(x.len() == w.len() && out.len() == x.len());
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the three lengths were checked equal.
        return unsafe { super::aarch64::norm::rms_norm(x, w, eps, out) };
    }
    let _ = cpu;
    super::scalar::rms_norm(x, w, eps, out)
}

/// [`rms_norm`] in place.
pub fn rms_norm_in_place(cpu: Cpu, x: &mut [f32], w: &[f32], eps: f32) {
    assert_eq!(x.len(), w.len());
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the lengths were checked equal.
        return unsafe { super::aarch64::norm::rms_norm_in_place(x, w, eps) };
    }
    let _ = cpu;
    super::scalar::rms_norm_in_place(x, w, eps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn every_isa_matches_the_scalar_twin_on_odd_sizes() {
        let mut rng = Rng(23);
        for n in [1, 3, 15, 16, 17, 64, 100, 576, 897] {
            let x = rng.vec(n, 3.0);
            let w = rng.vec(n, 1.5);
            let mut want = vec![0.0; n];
            crate::scalar::rms_norm(&x, &w, 1e-6, &mut want);
            for cpu in crate::available() {
                let mut got = vec![f32::NAN; n];
                rms_norm(cpu, &x, &w, 1e-6, &mut got);
                let mut inplace = x.clone();
                rms_norm_in_place(cpu, &mut inplace, &w, 1e-6);
                assert_eq!(got, inplace, "{cpu:?} n={n}: in place differs");
                for (g, e) in got.iter().zip(&want) {
                    assert!(
                        (g - e).abs() <= 1e-6 * (1.0 + e.abs()),
                        "{cpu:?} n={n}: {g} vs {e}"
                    );
                }
            }
        }
    }
}
