//! ggml's 5-bit types written with a weighted least-squares search: Q5_0 (`(q − 16)·d`) and
//! Q5_1 (`q·d + m`), blocks of 32 with f16 parameters, q in 0..=31.
//!
//! They are the size budget's step between 4-bit (4.125–5 bits a weight) and Q8 (8.25): the
//! engine runs both on its packed Q4 kernels with one high-bit plane, and llama.cpp reads them.
//! The search is the one our Q4 uses (`quant::search`), widened to 32 codes: trial scales
//! around the block's range, the least-squares scale (and offset) for each trial's codes,
//! rounded to the f16 that is stored, its error in closed form; then the best candidate's
//! codes are re-encoded to the nearest and refitted until that stops helping. Each weight
//! counts by its column's mean squared activation when the export is calibrated (llama.cpp's
//! imatrix weighting), else equally (Q5_0) or by `rms + |x|` (Q5_1), as in our Q4.

use crate::quant::gptq::BlockCodec;
use crate::quant::search::importance;
use half::f16;

/// Weights per block.
const QK: usize = 32;

/// A finite f16 `v`, or `None`.
fn half(v: f64) -> Option<f32> {
    let h = f16::from_f64(v);
    h.is_finite().then(|| h.to_f32())
}

/// Σw·l, Σw·l², Σw·l·x for the codes `code(x)` gives.
fn sums(x: &[f32], w: &[f32], code: impl Fn(f32) -> f32) -> (f64, f64, f64) {
    let (mut sl, mut sl2, mut slx) = (0.0f64, 0.0f64, 0.0f64);
    for (&v, &wi) in x.iter().zip(w) {
        let (l, wi) = (code(v) as f64, wi as f64);
        sl += wi * l;
        sl2 += wi * l * l;
        slx += wi * l * v as f64;
    }
    (sl, sl2, slx)
}

/// Σw, Σw·x, Σw·x².
fn moments(x: &[f32], w: &[f32]) -> (f64, f64, f64) {
    x.iter()
        .zip(w)
        .fold((0.0, 0.0, 0.0), |(n, s, s2), (&v, &wi)| {
            let (v, wi) = (v as f64, wi as f64);
            (n + wi, s + wi * v, s2 + wi * v * v)
        })
}

/// The f16 scale `d` of a symmetric block, codes `l = q − 16` in −16..=15.
fn sym_scale(x: &[f32], w: &[f32]) -> f32 {
    let max = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if max == 0.0 {
        return 0.0;
    }
    let (_, _, sx2) = moments(x, w);
    let code = |d: f32| {
        let inv = 1.0 / d;
        move |v: f32| (v * inv).round().clamp(-16.0, 15.0)
    };
    let err = |d: f32, (_, sl2, slx): (f64, f64, f64)| {
        let d = d as f64;
        sx2 - 2.0 * d * slx + d * d * sl2
    };
    // Least-squares scale for the codes behind `s`, rounded; kept if it lowers the error.
    let consider = |s: (f64, f64, f64), best: &mut (f64, f32)| {
        if s.1 <= 0.0 {
            return;
        }
        if let Some(d) = half(s.2 / s.1).filter(|&d| d != 0.0) {
            let e = err(d, s);
            if e < best.0 {
                *best = (e, d);
            }
        }
    };
    // ggml's own choice first: the largest magnitude onto code −16.
    let rtn = half(max as f64 / -16.0).unwrap_or(0.0);
    if rtn == 0.0 {
        return 0.0;
    }
    let mut best = (err(rtn, sums(x, w, code(rtn))), rtn);
    for is in -12..=12 {
        let d = max / -(16.0 + 0.1 * is as f32);
        consider(sums(x, w, code(d)), &mut best);
    }
    for _ in 0..2 {
        let before = best.0;
        consider(sums(x, w, code(best.1)), &mut best);
        if best.0 >= before {
            break;
        }
    }
    best.1
}

/// The f16 `(d, m)` of an asymmetric block, `x ≈ q·d + m`, q in 0..=31.
fn asym_params(x: &[f32], w: &[f32]) -> (f32, f32) {
    let (min, max) = x
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let Some(m0) = half(min as f64) else {
        return (0.0, 0.0);
    };
    if max.partial_cmp(&min) != Some(std::cmp::Ordering::Greater) {
        return (0.0, m0);
    }
    let (n, sx, sx2) = moments(x, w);
    let code = |d: f32, m: f32| {
        let inv = 1.0 / d;
        move |v: f32| ((v - m) * inv).round().clamp(0.0, 31.0)
    };
    // Σw(x − d·l − m)² for the codes behind the sums.
    let err = |d: f32, m: f32, (sl, sl2, slx): (f64, f64, f64)| {
        let (d, m) = (d as f64, m as f64);
        sx2 - 2.0 * d * slx - 2.0 * m * sx + d * d * sl2 + 2.0 * d * m * sl + n * m * m
    };
    let consider = |s: (f64, f64, f64), best: &mut (f64, f32, f32)| {
        let (sl, sl2, slx) = s;
        let det = n * sl2 - sl * sl;
        if det <= 0.0 {
            return;
        }
        let d = (n * slx - sl * sx) / det;
        let m = (sl2 * sx - sl * slx) / det;
        if let (Some(d), Some(m)) = (half(d), half(m)) {
            if d > 0.0 {
                let e = err(d, m, s);
                if e < best.0 {
                    *best = (e, d, m);
                }
            }
        }
    };
    let Some(rtn) = half((max - min) as f64 / 31.0).filter(|&d| d > 0.0) else {
        return (0.0, m0);
    };
    let mut best = (err(rtn, m0, sums(x, w, code(rtn, m0))), rtn, m0);
    // Code-space widths over the block's range: 31 is min/max; smaller ones clip the extremes,
    // which the refit pulls back where they help.
    for step in 0..=14 {
        let d = (max - min) / (25.5 + 0.5 * step as f32);
        consider(sums(x, w, code(d, min)), &mut best);
    }
    for _ in 0..2 {
        let before = best.0;
        consider(sums(x, w, code(best.1, best.2)), &mut best);
        if best.0 >= before {
            break;
        }
    }
    (best.1, best.2)
}

/// Writes one block: parameters, the codes' fifth bits (`qh`), then their nibbles, with
/// weight `j` and `j + 16` sharing byte `j` as ggml lays them out.
fn write(params: &[f32], codes: &[u8; QK], out: &mut Vec<u8>) {
    for &p in params {
        out.extend_from_slice(&f16::from_f32(p).to_le_bytes());
    }
    let mut qh = 0u32;
    for j in 0..16 {
        qh |= ((codes[j] as u32 >> 4) & 1) << j;
        qh |= ((codes[j + 16] as u32 >> 4) & 1) << (j + 16);
    }
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend((0..16).map(|j| (codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4)));
}

/// A 5-bit block's parameters, as ggml decodes them: `(q − 16)·d` (Q5_0) or `q·d + m` (Q5_1).
#[derive(Clone, Copy, Debug)]
pub(super) struct Q5 {
    d: f32,
    m: f32,
    sym: bool,
}

impl BlockCodec for Q5 {
    fn encode(&self, x: f32) -> u8 {
        if self.d == 0.0 {
            return if self.sym { 16 } else { 0 };
        }
        let inv = 1.0 / self.d;
        if self.sym {
            ((x * inv).round().clamp(-16.0, 15.0) + 16.0) as u8
        } else {
            ((x - self.m) * inv).round().clamp(0.0, 31.0) as u8
        }
    }

    fn decode(&self, q: u8) -> f32 {
        if self.sym {
            (q as i32 - 16) as f32 * self.d
        } else {
            q as f32 * self.d + self.m
        }
    }
}

/// The searched parameters of one block of 32 (`sym`: Q5_0, else Q5_1); `imp` the columns'
/// importance (mean squared activation).
pub(super) fn params(sym: bool, x: &[f32], imp: Option<&[f32]>) -> Q5 {
    if sym {
        // Plain squared error unless activation importance is known (as our symmetric Q4).
        let mut w = [1.0f32; QK];
        if imp.is_some() {
            importance(x, imp, &mut w);
        }
        Q5 {
            d: sym_scale(x, &w),
            m: 0.0,
            sym,
        }
    } else {
        let mut w = [0.0f32; QK];
        importance(x, imp, &mut w);
        let (d, m) = asym_params(x, &w);
        Q5 { d, m, sym }
    }
}

/// Writes one block with parameters `p` and its codes.
pub(super) fn write_block(p: Q5, codes: &[u8], out: &mut Vec<u8>) {
    let codes: &[u8; QK] = codes.try_into().expect("a block of 32 codes");
    if p.sym {
        write(&[p.d], codes, out);
    } else {
        write(&[p.d, p.m], codes, out);
    }
}

fn block(sym: bool, x: &[f32], imp: Option<&[f32]>, out: &mut Vec<u8>) {
    let p = params(sym, x, imp);
    let mut codes = [0u8; QK];
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = p.encode(v);
    }
    write_block(p, &codes, out);
}

/// One Q5_0 block of 32; `imp` the columns' importance (mean squared activation).
pub(super) fn q5_0(x: &[f32], imp: Option<&[f32]>, out: &mut Vec<u8>) {
    block(true, x, imp, out)
}

/// One Q5_1 block of 32; `imp` the columns' importance (mean squared activation).
pub(super) fn q5_1(x: &[f32], imp: Option<&[f32]>, out: &mut Vec<u8>) {
    block(false, x, imp, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::ggml::{dequantize, GgmlType};

    fn weights(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                (0..4)
                    .map(|_| {
                        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                        (*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                    })
                    .sum::<f32>()
                    * 0.05
            })
            .collect()
    }

    /// The compensated writer lays its blocks out as the plain one: with uncorrelated inputs
    /// (a diagonal Gram matrix) there is nothing to compensate and the bytes are the same.
    #[test]
    fn compensation_over_uncorrelated_inputs_changes_no_byte() {
        use crate::quant::gptq::Compensation;
        let mut seed = 4u64;
        let (rows, cols) = (21, 64);
        let x = weights(&mut seed, rows * cols);
        let mut h = vec![0f64; cols * cols];
        for i in 0..cols {
            h[i * cols + i] = 1.0 + i as f64;
        }
        let c = Compensation::from_gram(&h, cols, 10_000).unwrap();
        let imp: Vec<f32> = (0..cols).map(|i| 1.0 + i as f32).collect();
        for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
            let (mut plain, mut comp) = (Vec::new(), Vec::new());
            let q = super::super::quantize::quantize_weighted;
            q(ty, &x, cols, Some(&imp), &mut plain);
            super::super::quantize::quantize_compensated(ty, &x, cols, Some(&imp), &c, &mut comp);
            assert_eq!(plain, comp, "{}", ty.name());
        }
    }

    /// ggml's reference quantizers (`quantize_row_q5_0_ref`, `quantize_row_q5_1_ref`), for the
    /// comparison: round to nearest over the block's range.
    fn reference(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) {
        for b in x.chunks_exact(QK) {
            let mut codes = [0u8; QK];
            if ty == GgmlType::Q5_0 {
                let max = b
                    .iter()
                    .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
                let d = max / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                for (c, &v) in codes.iter_mut().zip(b) {
                    *c = ((v * id + 16.5) as i8).min(31) as u8;
                }
                write(&[d], &codes, out);
            } else {
                let (min, max) = b
                    .iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, c), &v| {
                        (a.min(v), c.max(v))
                    });
                let d = (max - min) / 31.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                for (c, &v) in codes.iter_mut().zip(b) {
                    *c = (((v - min) * id + 0.5) as u8).min(31);
                }
                write(&[d, min], &codes, out);
            }
        }
    }

    /// Both types decode (ggml's own arithmetic) within about a step of their input, with less
    /// error than ggml's round-to-nearest; a column weighted 100× comes out closer; constant
    /// and zero blocks decode exactly.
    #[test]
    fn five_bit_blocks_beat_round_to_nearest_and_follow_their_weights() {
        let mut seed = 11u64;
        let (rows, cols) = (64, 96);
        let x = weights(&mut seed, rows * cols);
        let err = |b: &[f32]| x.iter().zip(b).map(|(a, b)| (a - b).powi(2)).sum::<f32>();
        for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            super::super::quantize::quantize_weighted(ty, &x, cols, None, &mut ours);
            reference(ty, &x, &mut theirs);
            assert_eq!(
                ours.len() as u64,
                ty.bytes_for((rows * cols) as u64).unwrap()
            );
            let (mut a, mut b) = (vec![0.0; x.len()], vec![0.0; x.len()]);
            dequantize(ty, &ours, &mut a);
            dequantize(ty, &theirs, &mut b);
            assert!(
                err(&a) < 0.9 * err(&b),
                "{}: {} vs {}",
                ty.name(),
                err(&a),
                err(&b)
            );
            for (blk, got) in x.chunks_exact(QK).zip(a.chunks_exact(QK)) {
                let range = blk.iter().fold(0.0f32, |m, v| m.max(v.abs())) * 2.0;
                for (v, g) in blk.iter().zip(got) {
                    assert!(
                        (v - g).abs() <= range / 31.0 + 1e-6,
                        "{}: {v} vs {g}",
                        ty.name()
                    );
                }
            }
            let mut imp = vec![1.0f32; cols];
            imp[5] = 100.0;
            let mut weighted = Vec::new();
            super::super::quantize::quantize_weighted(ty, &x, cols, Some(&imp), &mut weighted);
            let mut c = vec![0.0; x.len()];
            dequantize(ty, &weighted, &mut c);
            let col = |b: &[f32]| {
                (0..rows)
                    .map(|r| (x[r * cols + 5] - b[r * cols + 5]).powi(2))
                    .sum::<f32>()
            };
            assert!(
                col(&c) < col(&a),
                "{}: {} vs {}",
                ty.name(),
                col(&c),
                col(&a)
            );
            for fill in [0.0f32, 0.25, -3.0] {
                let blk = [fill; QK];
                let mut o = Vec::new();
                super::super::quantize::quantize(ty, &blk, &mut o);
                let mut back = [1.0f32; QK];
                dequantize(ty, &o, &mut back);
                assert!(
                    back.iter().all(|&v| v == fill),
                    "{} of {fill}: {back:?}",
                    ty.name()
                );
            }
        }
    }
}
