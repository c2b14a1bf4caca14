//! A LoRA adapter's low-rank product beside a base layer's matmul: for each of `n` rows `x`,
//! `t = A·x` (`rank` dot products over the input) and then `y += s · Σ_j t_j · Bᵀ_j` (`rank`
//! scaled additions over the output). `B` is kept transposed (`[rank, out]`) so both halves
//! stream contiguous rows. The scalar twin sums in order; the SIMD versions (AVX-512, AVX2,
//! NEON) sum in lanes, so they differ from it by f32 rounding only.

use super::Cpu;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::Isa;
use half::f16;
use std::ops::Range;

/// An adapter factor's elements: f32, or f16 bits. Factors beside a quantized layer on the
/// integer kernels are kept in f16 (`crate::lora`): half the bytes a decode step reads, and a
/// rounding (2⁻¹¹ relative, of an addition already small beside the base) far below the
/// quantized weights' own.
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
}

impl<'a> Rows<'a> {
    pub fn len(self) -> usize {
        match self {
            Rows::F32(v) => v.len(),
            Rows::F16(v) => v.len(),
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    #[cfg(target_arch = "x86_64")]
    fn ptr(self) -> *const u8 {
        match self {
            Rows::F32(v) => v.as_ptr().cast(),
            Rows::F16(v) => v.as_ptr().cast(),
        }
    }

    /// Elements `range`.
    pub fn slice(self, range: Range<usize>) -> Rows<'a> {
        match self {
            Rows::F32(v) => Rows::F32(&v[range]),
            Rows::F16(v) => Rows::F16(&v[range]),
        }
    }
}

/// `Σ a_i · x_i` for a factor row `a`.
pub fn dot_rows(cpu: Cpu, a: Rows, x: &[f32]) -> f32 {
    match a {
        Rows::F32(a) => dot(cpu, a, x),
        Rows::F16(a) => dot_f16(cpu, a, x),
    }
}

/// `y += alpha · x` for a factor row `x`.
pub fn axpy_rows(cpu: Cpu, y: &mut [f32], alpha: f32, x: Rows) {
    match x {
        Rows::F32(x) => axpy(cpu, y, alpha, x),
        Rows::F16(x) => axpy_f16(cpu, y, alpha, x),
    }
}

/// Four [`dot_rows`] of one `x` with rows of one factor, bit for bit the four; AVX-512 reads
/// `x` once for all four (prefill's low-rank products are load-bound).
pub fn dot4_rows(cpu: Cpu, a: [Rows; 4], x: &[f32]) -> [f32; 4] {
    for r in a {
        assert_eq!(r.len(), x.len());
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx512) {
        let (ptrs, half) = (a.map(Rows::ptr), a.map(|r| matches!(r, Rows::F16(_))));
        if half == [true; 4] {
            // SAFETY: the `Cpu` token proves AVX-512 F/BW/VL and F16C; every row holds x.len()
            // f16 values (asserted above).
            return unsafe { super::x86::avx512::lora::dot4::<true>(ptrs, x) };
        }
        if half == [false; 4] {
            // SAFETY: as above, with f32 rows.
            return unsafe { super::x86::avx512::lora::dot4::<false>(ptrs, x) };
        }
    }
    a.map(|r| dot_rows(cpu, r, x))
}

/// `y += alpha[k] · x[k]` for k = 0..4 in order, bit for bit four [`axpy_rows`]; AVX-512 loads
/// and stores `y` once for all four.
pub fn axpy4_rows(cpu: Cpu, y: &mut [f32], alpha: [f32; 4], x: [Rows; 4]) {
    for r in x {
        assert_eq!(r.len(), y.len());
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx512) {
        let (ptrs, half) = (x.map(Rows::ptr), x.map(|r| matches!(r, Rows::F16(_))));
        if half == [true; 4] {
            // SAFETY: the `Cpu` token proves AVX-512 F/BW/VL and F16C; every row holds y.len()
            // f16 values (asserted above).
            return unsafe { super::x86::avx512::lora::axpy4::<true>(y, alpha, ptrs) };
        }
        if half == [false; 4] {
            // SAFETY: as above, with f32 rows.
            return unsafe { super::x86::avx512::lora::axpy4::<false>(y, alpha, ptrs) };
        }
    }
    for (a, r) in alpha.into_iter().zip(x) {
        axpy_rows(cpu, y, a, r);
    }
}

/// `t[j] = A_j · xr` for every rank `j`, four at a time.
pub fn project(cpu: Cpu, a: Rows, cols: usize, xr: &[f32], t: &mut [f32]) {
    let row = |j: usize| a.slice(j * cols..(j + 1) * cols);
    let mut j = 0;
    while j + 4 <= t.len() {
        let v = dot4_rows(cpu, [row(j), row(j + 1), row(j + 2), row(j + 3)], xr);
        t[j..j + 4].copy_from_slice(&v);
        j += 4;
    }
    for (k, tk) in t.iter_mut().enumerate().skip(j) {
        *tk = dot_rows(cpu, row(k), xr);
    }
}

/// `yr += Σ_j alpha_j · Bᵀ_j[c0..]` over ranks `j` in order, four at a time.
pub fn expand(cpu: Cpu, yr: &mut [f32], alpha: &[f32], bt: Rows, width: usize, c0: usize) {
    let len = yr.len();
    let row = |j: usize| bt.slice(j * width + c0..j * width + c0 + len);
    let mut j = 0;
    while j + 4 <= alpha.len() {
        let al = [alpha[j], alpha[j + 1], alpha[j + 2], alpha[j + 3]];
        axpy4_rows(cpu, yr, al, [row(j), row(j + 1), row(j + 2), row(j + 3)]);
        j += 4;
    }
    for (k, &a) in alpha.iter().enumerate().skip(j) {
        axpy_rows(cpu, yr, a, row(k));
    }
}

/// `y[r] += scale · Bᵀᵀ (A · x[r])` for each of the `n` rows of `x` (`n × cols`) and `y`
/// (`n × rows`); `a` is `[rank, cols]`, `bt` `[rank, rows]`. One matrix on the calling
/// thread: the twin [`add_low_ranks`] is held to.
#[allow(clippy::too_many_arguments)]
pub fn add_low_rank(
    cpu: Cpu,
    a: Rows,
    bt: Rows,
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
        project(cpu, a, cols, xr, &mut t);
        let alpha: Vec<f32> = t.iter().map(|tj| scale * tj).collect();
        expand(cpu, yr, &alpha, bt, rows, 0);
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

/// [`dot`] with `a` as f16 bits.
pub fn dot_f16(cpu: Cpu, a: &[u16], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F/BW/VL and F16C; lengths checked equal.
            return unsafe { super::x86::avx512::lora::dot_f16(a, b) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: the `Cpu` token proves AVX2, FMA and F16C; lengths checked equal.
            return unsafe { super::x86::avx2::lora::dot_f16(a, b) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the lengths were checked equal.
        return unsafe { super::aarch64::lora::dot_f16(a, b) };
    }
    let _ = cpu;
    dot_f16_scalar(a, b)
}

/// [`axpy`] with `x` as f16 bits.
pub fn axpy_f16(cpu: Cpu, y: &mut [f32], alpha: f32, x: &[u16]) {
    assert_eq!(y.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has(Isa::Avx512) {
            // SAFETY: the `Cpu` token proves AVX-512 F/BW/VL and F16C; lengths checked equal.
            return unsafe { super::x86::avx512::lora::axpy_f16(y, alpha, x) };
        }
        if cpu.has(Isa::Avx2) {
            // SAFETY: the `Cpu` token proves AVX2, FMA and F16C; lengths checked equal.
            return unsafe { super::x86::avx2::lora::axpy_f16(y, alpha, x) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if cpu.has(Isa::Neon) {
        // SAFETY: the `Cpu` token proves NEON; the lengths were checked equal.
        return unsafe { super::aarch64::lora::axpy_f16(y, alpha, x) };
    }
    let _ = cpu;
    axpy_f16_scalar(y, alpha, x)
}

/// The scalar twin of [`dot_f16`].
pub fn dot_f16_scalar(a: &[u16], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(&x, y)| f16::from_bits(x).to_f32() * y)
        .sum()
}

/// The scalar twin of [`axpy_f16`].
pub fn axpy_f16_scalar(y: &mut [f32], alpha: f32, x: &[u16]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y += alpha * f16::from_bits(x).to_f32());
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
pub(crate) mod tests {
    use super::*;
    use crate::testutil::{half_bits, Rng};

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

    fn from_half(v: &[u16]) -> Vec<f32> {
        v.iter().map(|&x| f16::from_bits(x).to_f32()).collect()
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
            // The same factors in f16: the reference takes their f16 values.
            let (a16, bt16) = (half_bits(&a), half_bits(&bt));
            let (ah, bth) = (from_half(&a16), from_half(&bt16));
            for (kind, fa, fb, ra, rb) in [
                ("f32", Rows::F32(&a), Rows::F32(&bt), &a, &bt),
                ("f16", Rows::F16(&a16), Rows::F16(&bt16), &ah, &bth),
            ] {
                let mut want = y0.clone();
                reference(ra, rb, rank, &x, n, 0.75, &mut want);
                let mut twin = y0.clone();
                add_low_rank(Cpu::scalar(), fa, fb, rank, &x, n, 0.75, &mut twin);
                for cpu in crate::available() {
                    let mut got = y0.clone();
                    add_low_rank(cpu, fa, fb, rank, &x, n, 0.75, &mut got);
                    for (i, ((g, w), t)) in got.iter().zip(&want).zip(&twin).enumerate() {
                        let tol = 1e-5 * (1.0 + w.abs()) * (cols as f32).sqrt();
                        assert!(
                            (g - w).abs() <= tol,
                            "{cpu:?} {kind} {rank}x{cols}x{rows} n={n} [{i}]: {g} vs {w}"
                        );
                        assert!((g - t).abs() <= tol, "{cpu:?} vs twin [{i}]: {g} vs {t}");
                    }
                }
            }
        }
    }

    /// The four-row kernels are bit for bit four single ones, on every ISA and odd lengths.
    #[test]
    fn four_at_once_equals_four_single_calls() {
        let mut rng = Rng(47);
        for len in [1, 15, 16, 17, 130, 899] {
            let rows: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(len, 0.5)).collect();
            let halves: Vec<Vec<u16>> = rows.iter().map(|r| half_bits(r)).collect();
            let x = rng.vec(len, 2.0);
            let alpha = [0.5, -1.25, 2.0, 0.125];
            for cpu in crate::available() {
                for half in [false, true] {
                    let r: [Rows; 4] = std::array::from_fn(|k| {
                        if half {
                            Rows::F16(&halves[k])
                        } else {
                            Rows::F32(&rows[k])
                        }
                    });
                    let one: Vec<u32> = r.iter().map(|&a| dot_rows(cpu, a, &x).to_bits()).collect();
                    let four: Vec<u32> =
                        dot4_rows(cpu, r, &x).iter().map(|v| v.to_bits()).collect();
                    assert_eq!(one, four, "{cpu:?} half {half} len {len}");
                    let mut y1 = x.clone();
                    for (a, row) in alpha.iter().zip(r) {
                        axpy_rows(cpu, &mut y1, *a, row);
                    }
                    let mut y4 = x.clone();
                    axpy4_rows(cpu, &mut y4, alpha, r);
                    assert_eq!(y1, y4, "{cpu:?} half {half} len {len}");
                }
            }
        }
    }
}
