//! Error-compensating quantization (GPTQ: Frantar et al., 2022, "Accurate Post-Training
//! Quantization for Generative Pre-trained Transformers").
//!
//! Rounding one weight of a row moves the layer's output by that error times its column's
//! activations. GPTQ quantizes a row's columns in order, and after each one shifts the columns
//! not yet quantized so that, over the calibration activations `X`, the output error
//! `‖(w − ŵ)·X‖²` stays least: with `H = XᵀX` and `U` the upper Cholesky factor of `H⁻¹`
//! (`H⁻¹ = UᵀU`), column `j`'s error `e = (w_j − ŵ_j) / U_jj` moves every later column `k` by
//! `−e·U_jk`. The block's parameters are chosen when its first column is reached, from the
//! weights as they are then, by the same search as without compensation.
//!
//! The search alone weighs each column by its mean squared activation (the diagonal of `H`);
//! this uses the whole of `H`, so correlated columns can absorb each other's rounding.

use super::params::BlockParams;

/// `U`, the upper Cholesky factor of `(H + λ·I)⁻¹` for one layer input, kept in f32
/// (`cols × cols`, row-major; only `j ≥ i` is used).
pub struct Compensation {
    pub cols: usize,
    u: Vec<f32>,
}

/// The damping added to `H`'s diagonal, relative to its mean (GPTQ's `percdamp`), for `cols`
/// inputs seen over `tokens` tokens. GPTQ's 1 % assumes hundreds of thousands of tokens; with
/// the few thousand of a calibration text the compensation fits that text and loses elsewhere.
/// Measured on SmolLM2-135M, Q4 block 64, KL over GSM8K text (docs/quantization.md): 2,048
/// tokens want 1.0 (0.01 loses to no compensation), 28,000 want 0.1. Hence `2·cols/tokens`,
/// kept within 0.1–1.
pub fn damping(cols: usize, tokens: usize) -> f64 {
    (2.0 * cols as f64 / tokens.max(1) as f64).clamp(0.1, 1.0)
}

impl std::fmt::Debug for Compensation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Compensation({} columns)", self.cols)
    }
}

impl Compensation {
    /// From `H = Σ xᵀx` over `tokens` rows (`cols × cols`, full and symmetric, row-major),
    /// damped by [`damping`]. Columns never active (`H_ii = 0`) get a unit diagonal. `None` if
    /// `H` is not positive definite even after ten times more damping, twice (then the search
    /// alone is used).
    pub fn from_gram(h: &[f64], cols: usize, tokens: usize) -> Option<Compensation> {
        assert_eq!(h.len(), cols * cols);
        let n = cols;
        let mean_diag = (0..n).map(|i| h[i * n + i]).sum::<f64>() / n.max(1) as f64;
        if !(mean_diag > 0.0 && mean_diag.is_finite()) {
            return None;
        }
        let mut damp = damping(cols, tokens) * mean_diag;
        for _ in 0..3 {
            // A = J·H·J (J reverses the order): Cholesky A = L·Lᵀ, then U = J·L⁻¹·J is upper
            // and UᵀU = J·A⁻¹·J = H⁻¹, with one factorisation and one triangular inverse.
            let a = |i: usize, j: usize| {
                let (ri, rj) = (n - 1 - i, n - 1 - j);
                let v = h[ri * n + rj];
                if ri == rj {
                    if v == 0.0 {
                        1.0
                    } else {
                        v + damp
                    }
                } else {
                    v
                }
            };
            if let Some(l) = cholesky(n, a) {
                // Column c of L⁻¹ (entries c..n) is column n−1−c of U, upwards from the
                // diagonal: U[i][j] = L⁻¹[n−1−i][n−1−j].
                let cols = lower_inverse_columns(n, &l);
                let mut u = vec![0f32; n * n];
                for (c, m) in cols.iter().enumerate() {
                    let j = n - 1 - c;
                    for (k, &v) in m.iter().enumerate() {
                        // m[k] = L⁻¹[c + k][c] = U[j − k][j].
                        u[(j - k) * n + j] = v as f32;
                    }
                }
                return Some(Compensation { cols: n, u });
            }
            damp *= 10.0;
        }
        None
    }

    fn row(&self, j: usize) -> &[f32] {
        &self.u[j * self.cols..(j + 1) * self.cols]
    }
}

/// `Σ a_k·b_k` in eight lanes, so it vectorises.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Lower Cholesky factor of the symmetric matrix `a(i, j)` (row-major), or `None` when it is
/// not positive definite.
fn cholesky(n: usize, a: impl Fn(usize, usize) -> f64) -> Option<Vec<f64>> {
    let mut l = vec![0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s = a(i, j) - dot(&l[i * n..i * n + j], &l[j * n..j * n + j]);
            if i == j {
                // Not positive (or NaN): not positive definite.
                if s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                    return None;
                }
                l[i * n + i] = s.sqrt();
            } else {
                l[i * n + j] = s / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// The columns of `L⁻¹` for a lower-triangular `L`, each from its diagonal down (column `c`
/// holds entries `c..n`): forward substitution `L·m = e_c`, columns in parallel.
fn lower_inverse_columns(n: usize, l: &[f64]) -> Vec<Vec<f64>> {
    use rayon::prelude::*;
    (0..n)
        .into_par_iter()
        .map(|c| {
            let mut m = vec![0f64; n - c];
            m[0] = 1.0 / l[c * n + c];
            for i in c + 1..n {
                let s = dot(&l[i * n + c..i * n + i], &m[..i - c]);
                m[i - c] = -s / l[i * n + i];
            }
            m
        })
        .collect()
}

/// Rows quantized together, so each row of `U` is read once per tile.
pub const TILE: usize = 8;

/// The largest block [`quantize_tile`] takes (IQ4_XS's super-block).
pub const MAX_BLOCK: usize = 256;

/// A block's chosen parameters as a scalar codec: the nearest code, and its value.
pub trait BlockCodec: Copy {
    fn encode(&self, x: f32) -> u8;
    fn decode(&self, q: u8) -> f32;
    /// [`BlockCodec::encode`] for column `o` of the block: a codec whose block holds
    /// sub-blocks with scales of their own (IQ4_XS: 8 of 32 in a super-block of 256) picks
    /// the sub-block's.
    #[inline]
    fn encode_at(&self, _o: usize, x: f32) -> u8 {
        self.encode(x)
    }
    /// [`BlockCodec::decode`] for column `o` of the block.
    #[inline]
    fn decode_at(&self, _o: usize, q: u8) -> f32 {
        self.decode(q)
    }
}

impl BlockCodec for BlockParams {
    fn encode(&self, x: f32) -> u8 {
        BlockParams::encode(*self, x)
    }
    fn decode(&self, q: u8) -> f32 {
        BlockParams::decode(*self, q)
    }
}

/// Receives `(row in the tile, block, parameters, codes)` for each block written.
pub type Emit<'a, C> = dyn FnMut(usize, usize, C, &[u8]) + 'a;

/// Quantizes a tile of rows (`rows[t]` a working copy of row `t`, changed in place) with
/// compensation: at the start of block `b` `params(t, b, block_values)` chooses row `t`'s
/// parameters from its current values, then each column's code is the nearest under them.
/// `emit(t, block, params, codes)` receives each row's block. Returns nothing else: the
/// decoded values are `params.decode(codes)`.
pub fn quantize_tile<C: BlockCodec>(
    comp: &Compensation,
    rows: &mut [Vec<f32>],
    block: usize,
    params: &dyn Fn(usize, usize, &[f32]) -> C,
    emit: &mut Emit<C>,
) {
    let cols = comp.cols;
    assert!(
        cols.is_multiple_of(block) && block <= MAX_BLOCK && rows.iter().all(|r| r.len() == cols)
    );
    let mut codes = vec![[0u8; MAX_BLOCK]; rows.len()];
    let mut chosen: Vec<C> = Vec::with_capacity(rows.len());
    let mut err = vec![0f32; rows.len()];
    for j in 0..cols {
        let (b, o) = (j / block, j % block);
        if o == 0 {
            chosen.clear();
            for (t, r) in rows.iter().enumerate() {
                chosen.push(params(t, b, &r[j..j + block]));
            }
        }
        let u = comp.row(j);
        let d = u[j];
        for (t, r) in rows.iter().enumerate() {
            let q = chosen[t].encode_at(o, r[j]);
            codes[t][o] = q;
            err[t] = (r[j] - chosen[t].decode_at(o, q)) / d;
        }
        let rest = &u[j + 1..];
        for (t, r) in rows.iter_mut().enumerate() {
            let e = err[t];
            if e != 0.0 {
                for (w, &c) in r[j + 1..].iter_mut().zip(rest) {
                    *w -= e * c;
                }
            }
        }
        if o == block - 1 {
            for t in 0..rows.len() {
                emit(t, b, chosen[t], &codes[t][..block]);
            }
        }
    }
}

/// Test inputs shared by the compensated writers' tests (here, `gguf::quantize`, `quant::q8`):
/// one generator, the inputs GPTQ is for, and the error it lowers.
#[cfg(test)]
pub(crate) mod testing {
    /// A uniform value in [−0.5, 0.5) from the LCG state `s`.
    pub(crate) fn rng(s: &mut u64) -> f32 {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    /// `Σ xᵀx` of the rows of `x` (`n` wide), full.
    pub(crate) fn gram(x: &[f32], n: usize) -> Vec<f64> {
        let mut h = vec![0f64; n * n];
        for row in x.chunks_exact(n) {
            for i in 0..n {
                for j in 0..n {
                    h[i * n + j] += row[i] as f64 * row[j] as f64;
                }
            }
        }
        h
    }

    /// `t` input rows `n` wide whose neighbours are correlated (an AR(1) walk with factor
    /// `decay`), every column `i` with `i % loud_every == 0` four times louder.
    pub(crate) fn correlated_inputs(
        s: &mut u64,
        t: usize,
        n: usize,
        decay: f32,
        loud_every: Option<usize>,
    ) -> Vec<f32> {
        let mut x = vec![0f32; t * n];
        for r in 0..t {
            let mut prev = 0.0;
            for i in 0..n {
                let gain = match loud_every {
                    Some(k) if i % k == 0 => 4.0,
                    _ => 1.0,
                };
                prev = decay * prev + rng(s) * gain;
                x[r * n + i] = prev;
            }
        }
        x
    }

    /// The output error `‖(w − ŵ)·X‖²` of `back` for the rows of `w` (`n` wide) over the
    /// input rows of `x`.
    pub(crate) fn output_error(w: &[f32], back: &[f32], x: &[f32], n: usize) -> f64 {
        let mut e = 0.0;
        for (wr, br) in w.chunks_exact(n).zip(back.chunks_exact(n)) {
            for xr in x.chunks_exact(n) {
                let d: f64 = (0..n).map(|i| ((wr[i] - br[i]) * xr[i]) as f64).sum();
                e += d * d;
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{correlated_inputs, gram, output_error, rng};
    use super::*;

    /// `U` is upper triangular with `UᵀU = (H + λI)⁻¹`, checked through `H·UᵀU = I`.
    #[test]
    fn the_factor_inverts_the_damped_gram_matrix() {
        let (n, t) = (37, 90);
        let mut s = 5u64;
        let x: Vec<f32> = (0..t * n).map(|_| rng(&mut s)).collect();
        let h = gram(&x, n);
        let c = Compensation::from_gram(&h, n, t).unwrap();
        let damp = damping(n, t) * (0..n).map(|i| h[i * n + i]).sum::<f64>() / n as f64;
        for i in 0..n {
            for j in 0..i {
                assert_eq!(c.u[i * n + j], 0.0);
            }
        }
        // (H + λI)·(UᵀU) = I.
        let mut hinv = vec![0f64; n * n];
        for i in 0..n {
            for j in 0..n {
                hinv[i * n + j] = (0..n)
                    .map(|k| c.u[k * n + i] as f64 * c.u[k * n + j] as f64)
                    .sum();
            }
        }
        for i in 0..n {
            for j in 0..n {
                let p: f64 = (0..n)
                    .map(|k| (h[i * n + k] + if i == k { damp } else { 0.0 }) * hinv[k * n + j])
                    .sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((p - want).abs() < 1e-4, "({i},{j}): {p}");
            }
        }
    }

    /// With uncorrelated inputs (diagonal `H`) there is nothing to compensate: the codes are
    /// the nearest ones, as without GPTQ.
    #[test]
    fn a_diagonal_gram_matrix_changes_nothing() {
        let n = 64;
        let mut h = vec![0f64; n * n];
        for i in 0..n {
            h[i * n + i] = 1.0 + i as f64;
        }
        let c = Compensation::from_gram(&h, n, 1000).unwrap();
        let mut s = 9u64;
        let row: Vec<f32> = (0..n).map(|_| rng(&mut s)).collect();
        let p = BlockParams {
            scale: half::f16::from_f32(0.07),
            zero: half::f16::from_f32(0.01),
        };
        let mut rows = vec![row.clone()];
        let mut got = Vec::new();
        quantize_tile(&c, &mut rows, 32, &|_, _, _| p, &mut |_, _, _, codes| {
            got.extend_from_slice(codes)
        });
        let want: Vec<u8> = row.iter().map(|&v| p.encode(v)).collect();
        assert_eq!(got, want);
    }

    /// With correlated inputs the output error `‖(w − ŵ)·X‖²` is clearly below that of the
    /// nearest codes under the same parameters.
    #[test]
    fn correlated_inputs_lower_the_output_error() {
        let (n, t, rows) = (64, 400, 16);
        let mut s = 21u64;
        // Inputs with strongly correlated neighbours.
        let x = correlated_inputs(&mut s, t, n, 0.8, None);
        let h = gram(&x, n);
        let c = Compensation::from_gram(&h, n, t).unwrap();
        let w: Vec<Vec<f32>> = (0..rows)
            .map(|_| (0..n).map(|_| rng(&mut s)).collect())
            .collect();
        let params = |v: &[f32]| {
            super::super::search::q4_params(v, false, super::super::search::Method::Search, None)
        };
        let out_err = |w: &[f32], q: &[f32]| output_error(w, q, &x, n);
        let (mut plain, mut comp) = (0.0, 0.0);
        for tile in w.chunks(TILE) {
            let mut work: Vec<Vec<f32>> = tile.to_vec();
            let mut dec = vec![vec![0f32; n]; tile.len()];
            quantize_tile(
                &c,
                &mut work,
                32,
                &|_, _, v| params(v),
                &mut |t, b, p, codes| {
                    for (k, &q) in codes.iter().enumerate() {
                        dec[t][b * 32 + k] = p.decode(q);
                    }
                },
            );
            for (r, d) in tile.iter().zip(&dec) {
                comp += out_err(r, d);
                let near: Vec<f32> = r
                    .chunks_exact(32)
                    .flat_map(|blk| {
                        let p = params(blk);
                        blk.iter().map(move |&v| p.decode(p.encode(v)))
                    })
                    .collect();
                plain += out_err(r, &near);
            }
        }
        assert!(comp < 0.8 * plain, "{comp} vs {plain}");
    }
}
