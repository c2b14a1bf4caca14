//! The statistics behind a report and a comparison: the standard error lm-eval prints, an exact
//! McNemar test on the items two runs disagree on, and a paired bootstrap interval for the
//! difference of two scores. Everything is deterministic (the bootstrap has a fixed seed), so
//! the same files always give the same report.

/// lm-eval's `mean_stderr`: the sample standard deviation (n − 1) over √n. None below 2 values.
pub fn mean_stderr(values: &[f64]) -> Option<f64> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some((var / n as f64).sqrt())
}

/// Two-sided exact McNemar p-value: with `b` pairs right only in the first run and `c` right
/// only in the second, the chance of a split at least this uneven if either run were equally
/// likely to win each disagreement (binomial, p = ½).
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k_max = b.min(c);
    // Sum C(n, k) / 2^n for k ≤ k_max in log space (n may be in the thousands).
    let mut ln_term = -(n as f64) * std::f64::consts::LN_2;
    let mut total = ln_term.exp();
    for k in 0..k_max {
        ln_term += ((n - k) as f64).ln() - ((k + 1) as f64).ln();
        total += ln_term.exp();
    }
    (2.0 * total).min(1.0)
}

/// One item's contribution to a paired score: units right in each run, out of `units`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairedItem {
    pub a: f64,
    pub b: f64,
    pub units: f64,
}

/// 95 % percentile interval of the score difference (second run minus first, as a fraction)
/// from `resamples` paired bootstrap draws over items: items are resampled whole, so units
/// that share an item (IFEval's instructions of one prompt) stay together.
pub fn paired_bootstrap_ci(
    items: &[PairedItem],
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    if items.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64(seed);
    let mut diffs = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let (mut a, mut b, mut units) = (0.0, 0.0, 0.0);
        for _ in 0..items.len() {
            let it = &items[rng.below(items.len())];
            a += it.a;
            b += it.b;
            units += it.units;
        }
        if units > 0.0 {
            diffs.push((b - a) / units);
        }
    }
    if diffs.is_empty() {
        return None;
    }
    diffs.sort_by(f64::total_cmp);
    let at = |q: f64| diffs[((q * (diffs.len() - 1) as f64).round() as usize).min(diffs.len() - 1)];
    Some((at(0.025), at(0.975)))
}

/// 95 % interval of the difference of an unweighted average over tasks (B − A, as a
/// fraction): each draw resamples the items within every task (paired, whole items) and averages
/// the tasks' differences, so a task with few items weighs as much as in the average itself.
pub fn stratified_bootstrap_mean_diff(
    tasks: &[Vec<PairedItem>],
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    if tasks.is_empty() || tasks.iter().any(|t| t.is_empty()) || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64(seed);
    let mut diffs = Vec::with_capacity(resamples);
    'draw: for _ in 0..resamples {
        let mut sum = 0.0;
        for items in tasks {
            let (mut a, mut b, mut units) = (0.0, 0.0, 0.0);
            for _ in 0..items.len() {
                let it = &items[rng.below(items.len())];
                a += it.a;
                b += it.b;
                units += it.units;
            }
            if units == 0.0 {
                continue 'draw;
            }
            sum += (b - a) / units;
        }
        diffs.push(sum / tasks.len() as f64);
    }
    if diffs.is_empty() {
        return None;
    }
    diffs.sort_by(f64::total_cmp);
    let at = |q: f64| diffs[((q * (diffs.len() - 1) as f64).round() as usize).min(diffs.len() - 1)];
    Some((at(0.025), at(0.975)))
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, good enough for resampling.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-32 for any item count here).
    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_interval_brackets_the_average_difference() {
        let item = |a: f64, b: f64| PairedItem { a, b, units: 1.0 };
        // Task 1: B gains 20 points on 50 items; task 2: B loses 10 on 10 items.
        let t1: Vec<PairedItem> = (0..50)
            .map(|i| item(0.0, (i % 5 == 0) as u8 as f64))
            .collect();
        let t2: Vec<PairedItem> = (0..10).map(|i| item((i == 0) as u8 as f64, 0.0)).collect();
        let tasks = vec![t1, t2];
        let (lo, hi) = stratified_bootstrap_mean_diff(&tasks, 2000, 7).unwrap();
        let mean = (0.2 - 0.1) / 2.0;
        assert!(lo < mean && mean < hi, "{lo} {hi}");
        assert_eq!(
            stratified_bootstrap_mean_diff(&tasks, 2000, 7),
            Some((lo, hi))
        );
        let same: Vec<PairedItem> = (0..20).map(|_| item(1.0, 1.0)).collect();
        assert_eq!(
            stratified_bootstrap_mean_diff(&[same], 100, 1),
            Some((0.0, 0.0))
        );
        assert_eq!(stratified_bootstrap_mean_diff(&[vec![]], 100, 1), None);
    }

    #[test]
    fn mcnemar_matches_the_binomial_by_hand() {
        // b = 1, c = 5: 2 × (1 + 6) / 64.
        assert!((mcnemar_exact(1, 5) - 14.0 / 64.0).abs() < 1e-12);
        assert!((mcnemar_exact(5, 1) - 14.0 / 64.0).abs() < 1e-12);
        assert_eq!(mcnemar_exact(3, 3), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // 0 vs 10: 2 / 1024.
        assert!((mcnemar_exact(0, 10) - 2.0 / 1024.0).abs() < 1e-15);
        // Large counts stay finite and small.
        let p = mcnemar_exact(400, 600);
        assert!(p > 0.0 && p < 1e-9, "{p}");
    }

    #[test]
    fn stderr_is_lm_evals() {
        let v = [1.0, 0.0, 1.0, 1.0];
        // sample var = 0.25, / 4 → 0.0625 → 0.25
        assert!((mean_stderr(&v).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(mean_stderr(&[1.0]), None);
    }

    #[test]
    fn bootstrap_interval_brackets_the_difference_and_is_reproducible() {
        let items: Vec<PairedItem> = (0..200)
            .map(|i| PairedItem {
                a: f64::from(i % 2 == 0),
                b: f64::from(i % 4 != 3),
                units: 1.0,
            })
            .collect();
        // a = 0.5, b = 0.75: difference 0.25.
        let (lo, hi) = paired_bootstrap_ci(&items, 2000, 7).unwrap();
        assert!(lo < 0.25 && 0.25 < hi && lo > 0.1 && hi < 0.4, "{lo} {hi}");
        assert_eq!(paired_bootstrap_ci(&items, 2000, 7), Some((lo, hi)));
        let same: Vec<PairedItem> = items.iter().map(|p| PairedItem { b: p.a, ..*p }).collect();
        assert_eq!(paired_bootstrap_ci(&same, 500, 1), Some((0.0, 0.0)));
    }
}
