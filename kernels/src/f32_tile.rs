//! `out[r·n + t] = Σ_k w[r·k_len + k] · x[t·k_len + k]`: a tile of decoded weight rows times a
//! batch of activation rows (prefill and perplexity). Register-blocked 4 rows × 2 tokens with
//! eight-lane partial sums, written once as a generic body and compiled twice: plain (scalar
//! twin, any CPU) and with AVX2+FMA enabled (x86-64, chosen at run time).

use super::Cpu;
#[cfg(target_arch = "x86_64")]
use super::Isa;

/// Runs the best tile kernel `cpu` has (AVX2 + FMA, else the scalar twin).
pub fn tile(cpu: Cpu, w: &[f32], rows: usize, x: &[f32], n: usize, k: usize, out: &mut [f32]) {
    assert!(w.len() >= rows * k && x.len() >= n * k && out.len() >= rows * n);
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx2) {
        // SAFETY: the `Cpu` token proves AVX2 and FMA; the lengths were checked above.
        return unsafe { tile_avx2_inner(w, rows, x, n, k, out) };
    }
    let _ = cpu;
    tile_scalar(w, rows, x, n, k, out)
}

/// The scalar twin: the definition every other version must match (up to FMA rounding).
pub fn tile_scalar(w: &[f32], rows: usize, x: &[f32], n: usize, k: usize, out: &mut [f32]) {
    body(w, rows, x, n, k, out, |a, b, c| a * b + c)
}

/// Same loop structure as the scalar body, with the 4×2 block in AVX2 registers.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `w`, `x`, `out` hold at least `rows·k`, `n·k`,
/// `rows·n` values (checked by `tile`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_inner(w: &[f32], rows: usize, x: &[f32], n: usize, k: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let full = k / L * L;
    let mut r = 0;
    while r + 4 <= rows {
        let mut t = 0;
        while t + 2 <= n {
            let mut acc = [_mm256_setzero_ps(); 8];
            let wp = [0, 1, 2, 3].map(|i| w.as_ptr().add((r + i) * k));
            let (xa, xb) = (x.as_ptr().add(t * k), x.as_ptr().add((t + 1) * k));
            let mut c = 0;
            while c < full {
                // SAFETY: c + 8 <= full <= k, so every load is inside its row.
                let va = _mm256_loadu_ps(xa.add(c));
                let vb = _mm256_loadu_ps(xb.add(c));
                for i in 0..4 {
                    let wv = _mm256_loadu_ps(wp[i].add(c));
                    acc[2 * i] = _mm256_fmadd_ps(wv, va, acc[2 * i]);
                    acc[2 * i + 1] = _mm256_fmadd_ps(wv, vb, acc[2 * i + 1]);
                }
                c += L;
            }
            for i in 0..4 {
                for j in 0..2 {
                    let mut lanes = [0.0f32; L];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), acc[2 * i + j]);
                    let mut s: f32 = lanes.iter().sum();
                    let (wr, xr) = (
                        &w[(r + i) * k..(r + i + 1) * k],
                        &x[(t + j) * k..(t + j + 1) * k],
                    );
                    for c in full..k {
                        s = wr[c].mul_add(xr[c], s);
                    }
                    out[(r + i) * n + t + j] = s;
                }
            }
            t += 2;
        }
        for t in t..n {
            for i in 0..4 {
                out[(r + i) * n + t] = dot(
                    &w[(r + i) * k..(r + i + 1) * k],
                    &x[t * k..(t + 1) * k],
                    f32::mul_add,
                );
            }
        }
        r += 4;
    }
    for r in r..rows {
        for t in 0..n {
            out[r * n + t] = dot(&w[r * k..(r + 1) * k], &x[t * k..(t + 1) * k], f32::mul_add);
        }
    }
}

const L: usize = 8;

#[inline(always)]
fn body(
    w: &[f32],
    rows: usize,
    x: &[f32],
    n: usize,
    k: usize,
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let row = |r: usize| &w[r * k..(r + 1) * k];
    let tok = |t: usize| &x[t * k..(t + 1) * k];
    let mut r = 0;
    while r + 4 <= rows {
        let ws = [row(r), row(r + 1), row(r + 2), row(r + 3)];
        let mut t = 0;
        while t + 2 <= n {
            let s = dot_4x2(ws, [tok(t), tok(t + 1)], fma);
            for i in 0..4 {
                out[(r + i) * n + t] = s[i][0];
                out[(r + i) * n + t + 1] = s[i][1];
            }
            t += 2;
        }
        if t < n {
            for i in 0..4 {
                out[(r + i) * n + t] = dot(ws[i], tok(t), fma);
            }
        }
        r += 4;
    }
    for r in r..rows {
        for t in 0..n {
            out[r * n + t] = dot(row(r), tok(t), fma);
        }
    }
}

#[inline(always)]
fn dot_4x2(
    w: [&[f32]; 4],
    x: [&[f32]; 2],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) -> [[f32; 2]; 4] {
    let k = x[0].len();
    let mut acc = [[[0.0f32; L]; 2]; 4];
    let full = k / L * L;
    for c in (0..full).step_by(L) {
        let (xa, xb) = (&x[0][c..c + L], &x[1][c..c + L]);
        for i in 0..4 {
            let wi = &w[i][c..c + L];
            for l in 0..L {
                acc[i][0][l] = fma(wi[l], xa[l], acc[i][0][l]);
                acc[i][1][l] = fma(wi[l], xb[l], acc[i][1][l]);
            }
        }
    }
    let mut out = [[0.0f32; 2]; 4];
    for i in 0..4 {
        for j in 0..2 {
            let mut s: f32 = acc[i][j].iter().sum();
            for c in full..k {
                s = fma(w[i][c], x[j][c], s);
            }
            out[i][j] = s;
        }
    }
    out
}

#[inline(always)]
fn dot(a: &[f32], b: &[f32], fma: impl Fn(f32, f32, f32) -> f32 + Copy) -> f32 {
    let mut acc = [0.0f32; L];
    let full = a.len() / L * L;
    for c in (0..full).step_by(L) {
        for l in 0..L {
            acc[l] = fma(a[c + l], b[c + l], acc[l]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for c in full..a.len() {
        s = fma(a[c], b[c], s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn every_version_matches_a_naive_dot_on_odd_sizes() {
        let mut seed = 1;
        for (rows, n, k) in [
            (1, 1, 1),
            (4, 2, 8),
            (5, 3, 17),
            (7, 5, 64),
            (9, 1, 100),
            (13, 7, 333),
        ] {
            let w = random(rows * k, &mut seed);
            let x = random(n * k, &mut seed);
            let mut want = vec![0.0f64; rows * n];
            for r in 0..rows {
                for t in 0..n {
                    want[r * n + t] = (0..k)
                        .map(|i| w[r * k + i] as f64 * x[t * k + i] as f64)
                        .sum();
                }
            }
            for cpu in crate::available() {
                let name = cpu.isa().name();
                let mut out = vec![0.0f32; rows * n];
                tile(cpu, &w, rows, &x, n, k, &mut out);
                for (o, e) in out.iter().zip(&want) {
                    assert!(
                        (*o as f64 - e).abs() < 1e-5 * (k as f64).sqrt(),
                        "{name} {rows}x{n}x{k}: {o} vs {e}"
                    );
                }
            }
        }
    }
}
