//! Choosing a block's 4-bit parameters.
//!
//! `Rtn` maps the block's min/max (asymmetric) or largest magnitude (symmetric) onto the code
//! range. `Search` (the default) tries a range of candidate scales around that, refits scale and
//! zero by least squares for the codes each candidate produces (the idea of llama.cpp's
//! make_qx_quants / make_qkx2_quants), rounds to f16, re-encodes with the stored parameters and
//! keeps the candidate with the lowest squared error — so the error it minimises is the error
//! of the bytes actually written.

use super::params::BlockParams;
use half::f16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Method {
    /// Round to nearest over the min/max range.
    Rtn,
    /// Least-squares scale search (default).
    #[default]
    Search,
}

#[cfg(test)]
/// Squared error of encoding `x` with `p` (nearest code per value).
fn sq_error(x: &[f32], p: BlockParams) -> f64 {
    let c = p.widen();
    x.iter()
        .map(|&v| ((c.decode(c.encode(v)) - v) as f64).powi(2))
        .sum()
}

fn params(scale: f32, zero: f32) -> Option<BlockParams> {
    let p = BlockParams {
        scale: f16::from_f32(scale),
        zero: f16::from_f32(zero),
    };
    (p.scale.is_finite() && p.zero.is_finite()).then_some(p)
}

/// The parameters of one block. `importance`, when given, is the mean squared activation of
/// each of the block's input columns (from calibration): the search then minimises the error
/// of the layer's output rather than of the weights (llama.cpp's imatrix idea).
pub fn q4_params(x: &[f32], sym: bool, method: Method, importance: Option<&[f32]>) -> BlockParams {
    if sym {
        sym_params(x, method, importance)
    } else {
        asym_params(x, method, importance)
    }
}

fn rtn_asym(min: f32, max: f32) -> BlockParams {
    let scale = (max - min) / 15.0;
    params(scale, min + 8.0 * scale).unwrap_or(BlockParams::ZERO)
}

fn asym_params(x: &[f32], method: Method, imp: Option<&[f32]>) -> BlockParams {
    let (min, max) = x
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    if !(max > min) {
        // Constant block: scale 0, every value decodes to the zero point.
        return params(0.0, min).unwrap_or(BlockParams::ZERO);
    }
    let rtn = rtn_asym(min, max);
    if method == Method::Rtn || x.len() % LANES != 0 {
        return rtn;
    }
    let mut w = [0.0f32; 128];
    let w = &mut w[..x.len()];
    importance(x, imp, w);
    let w = &*w;
    let st = Sums::of(x, w);
    let mut best = (weighted_error(x, w, rtn), rtn);
    // Candidate code-space widths over the block's range: 15 is min/max; smaller widths clip
    // the extremes, which the least-squares refit then pulls back where they help.
    for step in 0..=12 {
        let iscale = (10.5 + 0.5 * step as f32) / (max - min);
        let sums = code_sums(x, w, |v| (((v - min) * iscale + 0.5) as u32).min(15));
        consider_asym(sums, &st, &mut best);
    }
    // Refinement: re-encode with the best parameters and refit, until it stops improving.
    for _ in 0..2 {
        let before = best.0;
        let c = best.1.widen();
        let sums = code_sums(x, w, |v| c.encode(v) as u32);
        consider_asym(sums, &st, &mut best);
        if best.0 >= before {
            break;
        }
    }
    let c = best.1.widen();
    let sums = code_sums(x, w, |v| c.encode(v) as u32);
    dual_exact(best.1, sums, &st).unwrap_or(best.1)
}

/// The parameters nearest to `p` whose zero point is also exact in ggml's Q4_1 convention
/// (`w = q·d + m` with f16 `d`, `m`): `m = zero − 8·scale` must be an f16, so that one
/// quantization serves both formats bit for bit. The offset is chosen on the f16 grid of `m`
/// (steps of about scale/128, far below the quantization step), by the closed-form error of the
/// block's current codes.
fn dual_exact(p: BlockParams, (sl, sl2, slx): (f64, f64, f64), st: &Sums) -> Option<BlockParams> {
    let s = p.scale.to_f32() as f64;
    let m_real = p.zero.to_f32() as f64 - 8.0 * s;
    let m0 = f16::from_f64(m_real);
    let mut best: Option<(f64, BlockParams)> = None;
    let mut m = m0;
    // m0 and its two neighbours on each side.
    let mut cands = vec![m0];
    for _ in 0..2 {
        m = f16::from_bits(m.to_bits().wrapping_add(1));
        cands.push(m);
    }
    m = m0;
    for _ in 0..2 {
        m = f16::from_bits(m.to_bits().wrapping_sub(1));
        cands.push(m);
    }
    for m in cands.into_iter().filter(|m| m.is_finite()) {
        let z = m.to_f64() + 8.0 * s;
        let zero = f16::from_f64(z);
        if zero.to_f64() != z || !zero.is_finite() {
            continue;
        }
        let mm = m.to_f64();
        // Σ(x − s·l − m)² for the current codes l.
        let err = st.sx2 - 2.0 * s * slx - 2.0 * mm * st.sx
            + s * s * sl2
            + 2.0 * s * mm * sl
            + st.n * mm * mm;
        if best.is_none_or(|(e, _)| err < e) {
            best = Some((
                err,
                BlockParams {
                    scale: p.scale,
                    zero,
                },
            ));
        }
    }
    best.map(|(_, p)| p)
}

const LANES: usize = 8;

/// Σl, Σl², Σl·x for the codes `code(x)` gives, in eight lanes so the loop vectorises (the
/// integer sums are exact; the float sum's order is fixed).
#[inline]
fn code_sums(x: &[f32], w: &[f32], code: impl Fn(f32) -> u32) -> (f64, f64, f64) {
    let (mut l1, mut l2, mut lx) = ([0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES]);
    for (xs, ws) in x.chunks_exact(LANES).zip(w.chunks_exact(LANES)) {
        for i in 0..LANES {
            let l = code(xs[i]) as f32;
            let wl = ws[i] * l;
            l1[i] += wl;
            l2[i] += wl * l;
            lx[i] += wl * xs[i];
        }
    }
    let total = |a: [f32; LANES]| a.iter().map(|&v| v as f64).sum::<f64>();
    (total(l1), total(l2), total(lx))
}

/// Importance of each weight in the fit. Without activation data larger magnitudes count more
/// (llama.cpp's make_qkx2_quants uses the same `rms + |x|`); with it, each weight counts by its
/// column's mean squared activation times `sqrt(σ² + x²)` (llama.cpp's imatrix weighting).
pub(crate) fn importance(x: &[f32], imp: Option<&[f32]>, w: &mut [f32]) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    match imp {
        None => {
            let rms = ms.sqrt();
            for (wi, &v) in w.iter_mut().zip(x) {
                *wi = rms + v.abs();
            }
        }
        Some(a) => {
            for ((wi, &v), &ai) in w.iter_mut().zip(x).zip(a) {
                // A floor keeps columns never seen active from being ignored entirely.
                *wi = (ai + 1e-8) * (ms + v * v).sqrt();
            }
        }
    }
}

/// Σ w·(x − x̂)² after encoding each value to its nearest code.
fn weighted_error(x: &[f32], w: &[f32], p: BlockParams) -> f64 {
    let c = p.widen();
    x.iter()
        .zip(w)
        .map(|(&v, &wi)| wi as f64 * ((c.decode(c.encode(v)) - v) as f64).powi(2))
        .sum()
}

/// Weighted block sums that do not depend on the codes.
struct Sums {
    n: f64,
    sx: f64,
    sx2: f64,
}

impl Sums {
    /// Σw, Σw·x, Σw·x².
    fn of(x: &[f32], w: &[f32]) -> Sums {
        let (mut n, mut sx, mut sx2) = (0.0f64, 0.0f64, 0.0f64);
        for (&v, &wi) in x.iter().zip(w) {
            let (v, wi) = (v as f64, wi as f64);
            n += wi;
            sx += wi * v;
            sx2 += wi * v * v;
        }
        Sums { n, sx, sx2 }
    }
}

/// Least-squares (scale, offset) for `x ≈ scale·l + offset` given the codes' sums, rounded to
/// our f16 parameters; its squared error in closed form (an upper bound of the error after
/// re-encoding each value to its nearest code).
fn consider_asym((sl, sl2, slx): (f64, f64, f64), st: &Sums, best: &mut (f64, BlockParams)) {
    let d = st.n * sl2 - sl * sl;
    if d <= 0.0 {
        return;
    }
    let scale = (st.n * slx - sl * st.sx) / d;
    let offset = (sl2 * st.sx - sl * slx) / d;
    if scale <= 0.0 {
        return;
    }
    let Some(p) = params(scale as f32, (offset + 8.0 * scale) as f32) else {
        return;
    };
    let (s, m) = (
        p.scale.to_f32() as f64,
        p.zero.to_f32() as f64 - 8.0 * p.scale.to_f32() as f64,
    );
    // Σ(x − s·l − m)²
    let err =
        st.sx2 - 2.0 * s * slx - 2.0 * m * st.sx + s * s * sl2 + 2.0 * s * m * sl + st.n * m * m;
    if err < best.0 {
        *best = (err, p);
    }
}

fn sym_params(x: &[f32], method: Method, imp: Option<&[f32]>) -> BlockParams {
    // The value of largest magnitude, with its sign: it maps to code 0 (−8·scale) exactly.
    let max = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if max == 0.0 {
        return BlockParams::ZERO;
    }
    let rtn = params(max / -8.0, 0.0).unwrap_or(BlockParams::ZERO);
    if method == Method::Rtn {
        return rtn;
    }
    // Plain squared error unless activation importance is known.
    let mut w = [1.0f32; 128];
    let w = &mut w[..x.len()];
    if imp.is_some() {
        importance(x, imp, w);
    }
    let w = &*w;
    let sx2: f64 = x
        .iter()
        .zip(w)
        .map(|(&v, &wi)| wi as f64 * v as f64 * v as f64)
        .sum();
    let mut best = (weighted_error(x, w, rtn), rtn);
    for is in -12..=8 {
        let iscale = -(8.0 + 0.15 * is as f32) / max;
        let (mut slx, mut sl2) = (0.0f32, 0.0f32);
        for (&v, &wi) in x.iter().zip(w) {
            // Round half up via truncation of a non-negative value, then back to −8..=7.
            let l = (((v * iscale).max(-8.5) + 8.5) as i32).min(15) as f32 - 8.0;
            slx += wi * l * v;
            sl2 += wi * l * l;
        }
        if sl2 == 0.0 {
            continue;
        }
        let Some(p) = params(slx / sl2, 0.0) else {
            continue;
        };
        let s = p.scale.to_f32() as f64;
        let err = sx2 - 2.0 * s * slx as f64 + s * s * sl2 as f64;
        if err < best.0 {
            best = (err, p);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_never_loses_to_rtn() {
        let mut s = 7u64;
        let mut total = [[0.0f64; 2]; 2];
        for _ in 0..300 {
            // Roughly Gaussian (sum of four uniforms), like trained weights.
            let x: Vec<f32> = (0..64)
                .map(|_| {
                    (0..4)
                        .map(|_| {
                            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                        })
                        .sum::<f32>()
                        * 0.05
                })
                .collect();
            let mut w = vec![0.0; 64];
            importance(&x, None, &mut w);
            for (i, sym) in [false, true].into_iter().enumerate() {
                let (rp, sp) = (
                    q4_params(&x, sym, Method::Rtn, None),
                    q4_params(&x, sym, Method::Search, None),
                );
                let (rtn, found) = (sq_error(&x, rp), sq_error(&x, sp));
                if !sym {
                    // The asymmetric search minimises the importance-weighted error: per block it
                    // never loses to min/max on that objective.
                    assert!(
                        weighted_error(&x, &w, sp) <= weighted_error(&x, &w, rp) * (1.0 + 1e-6)
                    );
                } else {
                    assert!(found <= rtn + 1e-12);
                }
                total[i][0] += rtn;
                total[i][1] += found;
            }
        }
        for t in total {
            eprintln!(
                "squared error rtn {:.4e} search {:.4e} ({:.1}%)",
                t[0],
                t[1],
                100.0 * (1.0 - t[1] / t[0])
            );
            assert!(
                t[1] < 0.92 * t[0],
                "search should cut the error clearly: {t:?}"
            );
        }
    }
}
