//! A LoRA adapter's low-rank product beside a base layer's matmul: for each of `n` rows `x`,
//! `t = A·x` (`rank` dot products over the input) and then `y += s · Σ_j t_j · Bᵀ_j` (`rank`
//! scaled additions over the output). `B` is kept transposed (`[rank, out]`) so both halves
//! stream contiguous rows. The scalar twin sums in order; the SIMD versions (AVX-512, AVX2,
//! NEON) sum in lanes, so they differ from it by f32 rounding only.

use super::Cpu;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::Isa;

/// `y[r] += scale · Bᵀᵀ (A · x[r])` for each of the `n` rows of `x` (`n × cols`) and `y`
/// (`n × rows`); `a` is `[rank, cols]`, `bt` `[rank, rows]`.
#[allow(clippy::too_many_arguments)]
pub fn add_low_rank(
    cpu: Cpu,
    a: &[f32],
    bt: &[f32],
    rank: usize,
    x: &[f32],
    n: usize,
    scale: f32,
    y: &mut [f32],
) {
    if n == 0 || rank == 0 {
        return;
    }
    let (cols, rows) = (x.len() / n, y.len() / n);
    assert!(
        x.len() == n * cols
            && y.len() == n * rows
            && a.len() == rank * cols
            && bt.len() == rank * rows,
        "add_low_rank: shapes disagree"
    );
    let mut t = vec![0f32; rank];
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(rows)) {
        for (j, tj) in t.iter_mut().enumerate() {
            *tj = dot(cpu, &a[j * cols..(j + 1) * cols], xr);
        }
        for (j, &tj) in t.iter().enumerate() {
            axpy(cpu, yr, scale * tj, &bt[j * rows..(j + 1) * rows]);
        }
    }
}

/// Σ `a_i · b_i`.
pub fn dot(cpu: Cpu, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F; the lengths were checked equal.
            return unsafe { super::x86::avx512::lora::dot(a, b) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: the `Cpu` token proves AVX2 and FMA; the lengths were checked equal.
            return unsafe { super::x86::avx2::lora::dot(a, b) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the lengths were checked equal.
        return unsafe { super::aarch64::lora::dot(a, b) };
    }
    let _ = cpu;
    dot_scalar(a, b)
}

/// `y += alpha · x`.
pub fn axpy(cpu: Cpu, y: &mut [f32], alpha: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F; the lengths were checked equal.
            return unsafe { super::x86::avx512::lora::axpy(y, alpha, x) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: the `Cpu` token proves AVX2 and FMA; the lengths were checked equal.
            return unsafe { super::x86::avx2::lora::axpy(y, alpha, x) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the lengths were checked equal.
        return unsafe { super::aarch64::lora::axpy(y, alpha, x) };
    }
    let _ = cpu;
    axpy_scalar(y, alpha, x)
}

/// The scalar twin of [`dot`]: an in-order f32 sum.
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The scalar twin of [`axpy`].
pub fn axpy_scalar(y: &mut [f32], alpha: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += alpha * x);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    /// The whole product in f64, the reference every ISA is held to.
    fn reference(a: &[f32], bt: &[f32], rank: usize, x: &[f32], n: usize, s: f32, y: &mut [f32]) {
        let (cols, rows) = (x.len() / n, y.len() / n);
        for r in 0..n {
            let t: Vec<f64> = (0..rank)
                .map(|j| {
                    (0..cols)
                        .map(|i| a[j * cols + i] as f64 * x[r * cols + i] as f64)
                        .sum()
                })
                .collect();
            for o in 0..rows {
                let d: f64 = (0..rank).map(|j| t[j] * bt[j * rows + o] as f64).sum();
                y[r * rows + o] += (s as f64 * d) as f32;
            }
        }
    }

    #[test]
    fn every_isa_matches_the_scalar_twin_on_odd_shapes() {
        let mut rng = Rng(41);
        for &(rank, cols, rows, n) in &[
            (1, 1, 1, 1),
            (3, 17, 5, 2),
            (8, 64, 33, 3),
            (16, 129, 47, 1),
            (7, 896, 128, 5),
            (16, 31, 2560, 2),
        ] {
            let a = rng.vec(rank * cols, 0.5);
            let bt = rng.vec(rank * rows, 0.5);
            let x = rng.vec(n * cols, 2.0);
            let y0 = rng.vec(n * rows, 1.0);
            let mut want = y0.clone();
            reference(&a, &bt, rank, &x, n, 0.75, &mut want);
            let mut twin = y0.clone();
            add_low_rank(Cpu::scalar(), &a, &bt, rank, &x, n, 0.75, &mut twin);
            for cpu in crate::kernels::available() {
                let mut got = y0.clone();
                add_low_rank(cpu, &a, &bt, rank, &x, n, 0.75, &mut got);
                for (i, ((g, w), t)) in got.iter().zip(&want).zip(&twin).enumerate() {
                    let tol = 1e-5 * (1.0 + w.abs()) * (cols as f32).sqrt();
                    assert!(
                        (g - w).abs() <= tol,
                        "{cpu:?} {rank}x{cols}x{rows} n={n} [{i}]: {g} vs {w}"
                    );
                    assert!((g - t).abs() <= tol, "{cpu:?} vs twin [{i}]: {g} vs {t}");
                }
            }
        }
    }
}
