//! f32 dot product (attention scores, f32 matrices): eight-lane partial sums, AVX2 + FMA where
//! present. The scalar twin is [`crate::ops::dot`].

use super::Isa;

/// `Σ a_i·b_i` over the shorter of the two.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if n >= 16 && super::active() >= Isa::Avx2 {
        // SAFETY: `active()` only reports AVX2 after run-time detection of AVX2 and FMA; the
        // kernel reads `n` values of each slice.
        return unsafe { dot_avx2(&a[..n], &b[..n]) };
    }
    crate::ops::dot(&a[..n], &b[..n])
}

/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n for both slices.
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
        s1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pb.add(i + 8)),
            s1,
        );
        i += 16;
    }
    if i + 8 <= n {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
        i += 8;
    }
    let s = _mm256_add_ps(s0, s1);
    let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps::<1>(h, h));
    let mut total = _mm_cvtss_f32(h);
    while i < n {
        total += a[i] * b[i];
        i += 1;
    }
    total
}

#[cfg(test)]
mod tests {
    use crate::kernels::testutil::Rng;

    #[test]
    fn matches_the_scalar_twin_on_odd_lengths() {
        let mut rng = Rng(21);
        for n in [0, 1, 15, 16, 17, 24, 64, 100, 257] {
            let (a, b) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
            let want = crate::ops::dot(&a, &b);
            let got = super::dot(&a, &b);
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{n}: {got} {want}"
            );
        }
    }
}
