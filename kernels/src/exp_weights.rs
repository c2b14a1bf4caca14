//! The sampler's weights `e^(x - max)` and their sum over a whole vocabulary.
//!
//! A sampled token's top-p or plain draw needs the sum of every candidate's weight: 49,152
//! exponentials a token, between two decode steps. The arithmetic is plain f64 (no libm, no
//! fused multiply-add, which Rust never forms by itself), so a seed draws the same tokens on
//! every machine; the SIMD versions are the same source compiled with the wider instruction set
//! enabled, which the compiler vectorises over the eight lanes of the sum without changing an
//! operation. The tests hold them to the scalar one bit for bit.

use super::Cpu;
#[cfg(target_arch = "x86_64")]
use super::Isa;

/// `e^x` for `x <= 0`, rounded to f32: the sampler's own, so a seed draws the same tokens on
/// every platform (`f32::exp` is the platform's libm, whose last bits differ between glibc,
/// bionic and Apple's) and so the whole-vocabulary pass vectorises. Cody-Waite reduction to
/// `|r| <= ln 2 / 2` and a degree-8 Taylor polynomial in f64 (relative error below 3e-10, so
/// the f32 result is the correctly rounded one but for about 1 in 200 values, one ulp off), scaled by
/// `2^n` through the exponent bits. Basic operations only, so the result is fixed by IEEE 754.
/// Anything below -104 (under f32's smallest subnormal), -inf and NaN give 0.
#[inline]
pub fn exp_neg(x: f32) -> f32 {
    // Branch-free (the out-of-range values are computed on a clamped input and dropped at the
    // end), so the whole-vocabulary loop vectorises.
    let inside = (x as f64) > -104.0;
    let x = if inside { x as f64 } else { -104.0 };
    // fdlibm's split of ln 2: `n * LN2_HI` is exact for |n| < 2^20.
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    // Adding 1.5 * 2^52 rounds to the nearest integer (ties to even), with no libm call.
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    let t = x * std::f64::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = INV_FACT[8];
    for k in (1..8).rev() {
        p = p * r + INV_FACT[k];
    }
    p = p * r + 1.0;
    // n is in [-151, 0] here: 2^n is a normal f64.
    let n = t.to_bits().wrapping_sub(SHIFT.to_bits()) as i64;
    let scale = f64::from_bits(((n + 1023) as u64) << 52);
    let v = (p * scale) as f32;
    if inside {
        v
    } else {
        0.0
    }
}

/// 1/k! for k = 0..=8.
const INV_FACT: [f64; 9] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
];

/// Σ `e^(x - max)` over `cand`'s values, each weight rounded to f32 as a draw sees it, summed
/// in f64 over eight lanes (candidate i in lane i mod 8, each lane in order, the lanes added
/// pairwise): a fixed order, the same on every machine, that needs no sort and vectorises.
pub fn weight_sum(cpu: Cpu, cand: &[(u32, f32)], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F.
            return unsafe { weight_sum_avx512(cand, max) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: the `Cpu` token proves AVX2.
            return unsafe { weight_sum_avx2(cand, max) };
        }
    }
    let _ = cpu;
    weight_sum_body(cand, max)
}

/// The largest of `cand`'s values, and whether any is NaN (which the largest ignores).
pub fn max_value(cpu: Cpu, cand: &[(u32, f32)]) -> (f32, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F.
            return unsafe { max_value_avx512(cand) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: the `Cpu` token proves AVX2.
            return unsafe { max_value_avx2(cand) };
        }
    }
    let _ = cpu;
    max_value_body(cand)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_value_avx512(cand: &[(u32, f32)]) -> (f32, bool) {
    max_value_body(cand)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_value_avx2(cand: &[(u32, f32)]) -> (f32, bool) {
    max_value_body(cand)
}

#[inline(always)]
fn max_value_body(cand: &[(u32, f32)]) -> (f32, bool) {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut nan = [false; 16];
    let mut chunks = cand.chunks_exact(16);
    for chunk in &mut chunks {
        for ((m, n), &(_, l)) in lanes.iter_mut().zip(nan.iter_mut()).zip(chunk) {
            *m = if l > *m { l } else { *m };
            *n |= l.is_nan();
        }
    }
    for ((m, n), &(_, l)) in lanes.iter_mut().zip(nan.iter_mut()).zip(chunks.remainder()) {
        *m = if l > *m { l } else { *m };
        *n |= l.is_nan();
    }
    let max = lanes
        .iter()
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    (max, nan.iter().any(|&n| n))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn weight_sum_avx512(cand: &[(u32, f32)], max: f32) -> f64 {
    weight_sum_body(cand, max)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn weight_sum_avx2(cand: &[(u32, f32)], max: f32) -> f64 {
    weight_sum_body(cand, max)
}

#[inline(always)]
fn weight_sum_body(cand: &[(u32, f32)], max: f32) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut chunks = cand.chunks_exact(8);
    for chunk in &mut chunks {
        for (s, &(_, l)) in lanes.iter_mut().zip(chunk) {
            *s += exp_neg(l - max) as f64;
        }
    }
    for (s, &(_, l)) in lanes.iter_mut().zip(chunks.remainder()) {
        *s += exp_neg(l - max) as f64;
    }
    ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn cpu_best() -> Cpu {
        Cpu::detect()
    }

    #[test]
    fn max_value_is_the_largest_and_sees_nan() {
        let mut rng = Rng(9);
        for n in [0usize, 1, 15, 16, 17, 1001] {
            let mut cand: Vec<(u32, f32)> = (0..n as u32).map(|i| (i, rng.f32() * 9.0)).collect();
            let want = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
            for cpu in Cpu::each() {
                assert_eq!(
                    max_value(cpu, &cand),
                    (want, false),
                    "{:?} n {n}",
                    cpu.isa()
                );
            }
            if n > 0 {
                cand[n / 2].1 = f32::NAN;
                for cpu in Cpu::each() {
                    assert!(max_value(cpu, &cand).1, "{:?} n {n}", cpu.isa());
                }
            }
        }
    }

    #[test]
    fn every_isa_sums_the_same_bits() {
        let mut rng = Rng(7);
        for n in [0usize, 1, 7, 8, 9, 63, 1001, 49_153] {
            let cand: Vec<(u32, f32)> = (0..n as u32)
                .map(|i| (i, rng.f32() * 60.0 - 40.0))
                .collect();
            let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
            let want = weight_sum(Cpu::scalar(), &cand, max);
            for cpu in Cpu::each() {
                let got = weight_sum(cpu, &cand, max);
                assert_eq!(got.to_bits(), want.to_bits(), "{:?} n {n}", cpu.isa());
            }
            let (m, nan) = max_value(cpu_best(), &cand);
            assert!(!nan && m == max, "n {n}");
            let plain: f64 = cand.iter().map(|&(_, l)| ((l - max) as f64).exp()).sum();
            assert!(
                (want - plain).abs() <= plain * 1e-6,
                "n {n}: {want} vs {plain}"
            );
        }
    }

    #[test]
    fn exp_neg_is_exp_rounded_to_f32() {
        let mut rng = Rng(3);
        let mut off = 0;
        for k in 0..200_000 {
            let x = match k % 3 {
                0 => -((rng.next_u32() as f64 / 4_294_967_296.0) * 110.0) as f32,
                1 => -((rng.next_u32() as f64 / 4_294_967_296.0) * 1.0) as f32,
                _ => -((rng.next_u32() as f64 / 4_294_967_296.0) * 20.0) as f32,
            };
            let want = (x as f64).exp() as f32;
            let got = exp_neg(x);
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= 1, "exp({x}) = {got}, want {want}");
            off += (ulps != 0) as usize;
        }
        // Correctly rounded but for values within 3e-10 of a rounding boundary.
        assert!(off <= 2_000, "{off} of 200000 off by one ulp");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-0.0), 1.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_neg(f32::NAN), 0.0);
        assert_eq!(exp_neg(-104.5), 0.0);
        assert!(exp_neg(-100.0) > 0.0);
    }
}
