//! ggml's quantizers for the GGUF export: Q8_0, Q4_0, Q4_1 (blocks of 32), as
//! `quantize_row_*_ref` in ggml-quants.c define them, so llama.cpp reads back what it would
//! have written itself; and IQ4_NL as llama-quantize makes it (`quantize_iq4_nl`: a scale
//! search over 15 candidates per block, errors weighted by an importance per column when
//! the export is calibrated, llama.cpp's imatrix weighting); Q5_0 and Q5_1 with our own
//! weighted search (`quantize5`).

use super::ggml::{GgmlType, IQ4NL_VALUES};
use half::f16;

/// The block types pocket writes, from any source (the others are only carried from a GGUF).
pub const ENCODED: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
];

/// Encodes `x` (a whole number of rows; length a multiple of 32 for block types).
pub fn quantize(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) {
    match ty {
        GgmlType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 => x.chunks_exact(32).for_each(|b| q8_0(b, out)),
        GgmlType::Q4_0 => x.chunks_exact(32).for_each(|b| q4_0(b, out)),
        GgmlType::Q4_1 => x.chunks_exact(32).for_each(|b| q4_1(b, out)),
        GgmlType::IQ4NL => x.chunks_exact(32).for_each(|b| iq4_nl(b, None, out)),
        GgmlType::IQ4XS => x.chunks_exact(256).for_each(|b| iq4_xs(b, None, out)),
        GgmlType::Q5_0 => x
            .chunks_exact(32)
            .for_each(|b| super::quantize5::q5_0(b, None, out)),
        GgmlType::Q5_1 => x
            .chunks_exact(32)
            .for_each(|b| super::quantize5::q5_1(b, None, out)),
        other => unreachable!("no exporter for {}", other.name()),
    }
}

/// [`quantize`] for rows of `cols` values, the error of each weight counted by its column's
/// `importance` (mean squared activation) where the type's search uses one (IQ4_NL, Q5_0,
/// Q5_1).
pub fn quantize_weighted(
    ty: GgmlType,
    x: &[f32],
    cols: usize,
    importance: Option<&[f32]>,
    out: &mut Vec<u8>,
) {
    match (ty, importance) {
        // The search is the slow part of an export: rows in parallel, joined in order.
        (_, imp) if ty.is_searched() && cols.is_multiple_of(ty.block().0) && cols > 0 => {
            use rayon::prelude::*;
            let imp = imp.filter(|i| i.len() == cols);
            let block: fn(&[f32], Option<&[f32]>, &mut Vec<u8>) = match ty {
                GgmlType::IQ4NL => iq4_nl,
                GgmlType::IQ4XS => iq4_xs,
                GgmlType::Q5_0 => super::quantize5::q5_0,
                _ => super::quantize5::q5_1,
            };
            let (be, bb) = ty.block();
            let rows: Vec<Vec<u8>> = x
                .par_chunks_exact(cols)
                .map(|row| {
                    let mut o = Vec::with_capacity(cols / be * bb);
                    for (c, b) in row.chunks_exact(be).enumerate() {
                        block(b, imp.map(|w| &w[c * be..(c + 1) * be]), &mut o);
                    }
                    o
                })
                .collect();
            rows.iter().for_each(|r| out.extend_from_slice(r));
        }
        _ => quantize(ty, x, out),
    }
}

/// [`quantize_weighted`] for the 5-bit types, IQ4_NL and IQ4_XS with GPTQ's error
/// compensation (`quant::gptq`): rows in tiles, each block's parameters searched on the row as
/// the compensation has left it (IQ4_XS: the super-block of 256's, its eight sub-block scales
/// chosen together when its first column is reached).
pub fn quantize_compensated(
    ty: GgmlType,
    x: &[f32],
    cols: usize,
    importance: Option<&[f32]>,
    comp: &crate::quant::gptq::Compensation,
    out: &mut Vec<u8>,
) {
    if !ty.is_searched() {
        return quantize_weighted(ty, x, cols, importance, out);
    }
    let block = ty.block().0;
    if comp.cols != cols || !cols.is_multiple_of(block) || cols == 0 {
        return quantize_weighted(ty, x, cols, importance, out);
    }
    let imp = importance.filter(|i| i.len() == cols);
    let imp_of = |b: usize| imp.map(|w| &w[b * block..(b + 1) * block]);
    match ty {
        GgmlType::IQ4NL => {
            let choose = |_: usize, b: usize, v: &[f32]| Iq4Nl::params(v, imp_of(b));
            let write = |p: Iq4Nl, codes: &[u8], o: &mut Vec<u8>| write_iq4_nl(p.d, codes, o);
            compensated_tiles(x, cols, block, comp, &choose, &write, out);
        }
        GgmlType::IQ4XS => {
            let choose = |_: usize, b: usize, v: &[f32]| Iq4Xs::params(v, imp_of(b));
            let write =
                |p: Iq4Xs, codes: &[u8], o: &mut Vec<u8>| write_iq4_xs(p.d, &p.ls, codes, o);
            compensated_tiles(x, cols, block, comp, &choose, &write, out);
        }
        _ => {
            let sym = ty == GgmlType::Q5_0;
            let choose =
                |_: usize, b: usize, v: &[f32]| super::quantize5::params(sym, v, imp_of(b));
            let write = &super::quantize5::write_block;
            compensated_tiles(x, cols, block, comp, &choose, write, out);
        }
    }
}

/// GPTQ over `x`'s rows in parallel tiles (`quant::gptq::quantize_tile`), blocks of `block`:
/// `choose` picks each block's parameters, `write` appends a block; rows joined in order.
fn compensated_tiles<C: crate::quant::gptq::BlockCodec + Send>(
    x: &[f32],
    cols: usize,
    block: usize,
    comp: &crate::quant::gptq::Compensation,
    choose: &(dyn Fn(usize, usize, &[f32]) -> C + Sync),
    write: &(dyn Fn(C, &[u8], &mut Vec<u8>) + Sync),
    out: &mut Vec<u8>,
) {
    use crate::quant::gptq::{quantize_tile, TILE};
    use rayon::prelude::*;
    let tiles: Vec<Vec<u8>> = x
        .par_chunks(TILE * cols)
        .map(|tile| {
            let mut work: Vec<Vec<f32>> = tile.chunks_exact(cols).map(|r| r.to_vec()).collect();
            let mut rows: Vec<Vec<u8>> = vec![Vec::new(); work.len()];
            quantize_tile(comp, &mut work, block, choose, &mut |t, _, p, codes| {
                write(p, codes, &mut rows[t])
            });
            rows.concat()
        })
        .collect();
    tiles.iter().for_each(|t| out.extend_from_slice(t));
}

/// The nearest of the ascending `values` to `x` (ggml's `best_index_int8`).
fn nearest(values: &[i8; 16], x: f32) -> usize {
    if x <= values[0] as f32 {
        return 0;
    }
    if x >= values[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0, 15);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < values[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (values[hi - 1] as f32) < values[hi] as f32 - x {
        hi - 1
    } else {
        hi
    }
}

/// One IQ4_NL block of 32 (`quantize_row_iq4_nl_impl` with ntry 7): the weighted
/// least-squares scale for the codes of each of 15 trial scales, the best kept; `qw` the
/// columns' importance (then each weight counts `qw·sqrt(σ² + x²)`), else `x²`.
fn iq4_nl(x: &[f32], qw: Option<&[f32]>, out: &mut Vec<u8>) {
    let d = iq4_nl_scale(x, qw);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let codes: [u8; 32] = std::array::from_fn(|j| nearest(&IQ4NL_VALUES, id * x[j]) as u8);
    write_iq4_nl(d, &codes, out);
}

/// IQ4_NL's block layout: the f16 scale, then weight `j` in the low nibble of byte `j` and
/// weight `j + 16` in its high nibble.
fn write_iq4_nl(d: f32, codes: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        out.push(codes[j] | (codes[j + 16] << 4));
    }
}

/// The scale [`iq4_nl`] chooses for a block (0 for an all-zero block), before f16 rounding.
fn iq4_nl_scale(x: &[f32], qw: Option<&[f32]>) -> f32 {
    iq4_scale(x, qw, x.iter().map(|a| a * a).sum::<f32>() * 2.0 / 32.0)
}

/// One IQ4_XS super-block of 256 (`quantize_row_iq4_nl_impl` with super-block 256, ntry 7):
/// the scales of [`iq4_xs_scales`], and the codes found again under `d·l`.
fn iq4_xs(x: &[f32], qw: Option<&[f32]>, out: &mut Vec<u8>) {
    let (d, ls) = iq4_xs_scales(x, qw);
    let mut codes = [0u8; 256];
    for (ib, &l) in ls.iter().enumerate() {
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        for j in 0..32 {
            codes[ib * 32 + j] = nearest(&IQ4NL_VALUES, idl * x[ib * 32 + j]) as u8;
        }
    }
    write_iq4_xs(d, &ls, &codes, out);
}

/// An IQ4_XS super-block's scales: each 32-value sub-block's scale searched as IQ4_NL's (σ²
/// over the whole super-block), then one `d = −max/32` from the largest in magnitude (before
/// f16 rounding: ggml finds the codes under the unrounded one), and each sub-block's scale
/// rounded to a 6-bit multiple `l ∈ [−32, 31]` of it.
fn iq4_xs_scales(x: &[f32], qw: Option<&[f32]>) -> (f32, [i32; 8]) {
    let sigma2 = x.iter().map(|a| a * a).sum::<f32>() * 2.0 / 256.0;
    let scales: [f32; 8] = std::array::from_fn(|ib| {
        iq4_scale(&x[ib * 32..][..32], qw.map(|q| &q[ib * 32..][..32]), sigma2)
    });
    let max = scales
        .iter()
        .fold(0.0f32, |m, &s| if s.abs() > m.abs() { s } else { m });
    let d = -max / 32.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    // ggml's nearest_int: round half to even is what its float trick gives, as does
    // `round_ties_even`.
    let ls = scales.map(|sc| ((id * sc).round_ties_even() as i32).clamp(-32, 31));
    (d, ls)
}

/// IQ4_XS's super-block layout: the f16 `d`, the eight `l + 32` as two high bits each (16
/// bits) and four low bits each (4 bytes), then each sub-block's codes as IQ4_NL's.
fn write_iq4_xs(d: f32, ls: &[i32; 8], codes: &[u8], out: &mut Vec<u8>) {
    let (mut scales_h, mut scales_l) = (0u16, [0u8; 4]);
    for (ib, &l) in ls.iter().enumerate() {
        let l = (l + 32) as u8;
        scales_l[ib / 2] |= (l & 0x0F) << (4 * (ib % 2));
        scales_h |= ((l >> 4) as u16) << (2 * ib);
    }
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&scales_h.to_le_bytes());
    out.extend_from_slice(&scales_l);
    for ib in 0..8 {
        for j in 0..16 {
            out.push(codes[ib * 32 + j] | (codes[ib * 32 + 16 + j] << 4));
        }
    }
}

/// IQ4_NL's scale search for one block of 32: `sigma2` weighs the importance as
/// `qw·sqrt(σ² + x²)` (ggml takes σ² over the block for IQ4_NL, the super-block for IQ4_XS).
fn iq4_scale(x: &[f32], qw: Option<&[f32]>, sigma2: f32) -> f32 {
    const NTRY: i32 = 7;
    let v = &IQ4NL_VALUES;
    let weight: Vec<f32> = match qw {
        Some(q) => x
            .iter()
            .zip(q)
            .map(|(a, w)| w * (sigma2 + a * a).sqrt())
            .collect(),
        None => x.iter().map(|a| a * a).collect(),
    };
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &a in x {
        if a.abs() > amax {
            amax = a.abs();
            max = a;
        }
    }
    if amax < 1e-15 {
        return 0.0;
    }
    let fit = |id: f32| {
        let (mut sqx, mut sq2) = (0.0f32, 0.0f32);
        for (j, &a) in x.iter().enumerate() {
            let q = v[nearest(v, id * a)] as f32;
            sqx += weight[j] * q * a;
            sq2 += weight[j] * q * q;
        }
        (sqx, sq2)
    };
    let mut d = -max / v[0] as f32;
    let (sqx, sq2) = fit(1.0 / d);
    if sq2 > 0.0 {
        d = sqx / sq2;
    }
    let mut best = d * sqx;
    for itry in -NTRY..=NTRY {
        let id = (itry as f32 + v[0] as f32) / max;
        let (sqx, sq2) = fit(id);
        if sq2 > 0.0 && sqx * sqx > best * sq2 {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    d
}

/// An IQ4_NL block's stored scale, as GPTQ's compensated rounding uses it
/// (`quant::gptq::BlockCodec`): codes are the nearest table entry to `x / d`.
#[derive(Clone, Copy, Debug)]
pub struct Iq4Nl {
    pub d: f32,
}

impl Iq4Nl {
    /// [`iq4_nl`]'s scale for the block, rounded to the f16 it is stored as.
    pub fn params(x: &[f32], qw: Option<&[f32]>) -> Iq4Nl {
        Iq4Nl {
            d: f16::from_f32(iq4_nl_scale(x, qw)).to_f32(),
        }
    }
}

/// An IQ4_XS super-block's stored scales, as GPTQ's compensated rounding uses them: the f16
/// `d` and each sub-block's `l`; a code is the nearest table entry to `x / (d·l)` of its
/// sub-block.
#[derive(Clone, Copy, Debug)]
pub struct Iq4Xs {
    pub d: f32,
    pub ls: [i32; 8],
}

impl Iq4Xs {
    /// [`iq4_xs_scales`] for the super-block, `d` rounded to the f16 it is stored as.
    pub fn params(x: &[f32], qw: Option<&[f32]>) -> Iq4Xs {
        let (d, ls) = iq4_xs_scales(x, qw);
        Iq4Xs {
            d: f16::from_f32(d).to_f32(),
            ls,
        }
    }

    /// Sub-block `o / 32`'s step, `d·l`, as ggml's dequantizer forms it.
    fn step(&self, o: usize) -> f32 {
        self.d * self.ls[o / 32] as f32
    }
}

impl crate::quant::gptq::BlockCodec for Iq4Xs {
    fn encode(&self, x: f32) -> u8 {
        self.encode_at(0, x)
    }
    fn decode(&self, q: u8) -> f32 {
        self.decode_at(0, q)
    }
    fn encode_at(&self, o: usize, x: f32) -> u8 {
        let dl = self.step(o);
        let id = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        nearest(&IQ4NL_VALUES, id * x) as u8
    }
    fn decode_at(&self, o: usize, q: u8) -> f32 {
        self.step(o) * IQ4NL_VALUES[q as usize] as f32
    }
}

impl crate::quant::gptq::BlockCodec for Iq4Nl {
    fn encode(&self, x: f32) -> u8 {
        let id = if self.d != 0.0 { 1.0 / self.d } else { 0.0 };
        nearest(&IQ4NL_VALUES, id * x) as u8
    }
    fn decode(&self, q: u8) -> f32 {
        self.d * IQ4NL_VALUES[q as usize] as f32
    }
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    // roundf: half away from zero.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let max = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        let lo = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let hi = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        out.push(lo | (hi << 4));
    }
}

fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, max) = x
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
    for j in 0..16 {
        let lo = (((x[j] - min) * id + 0.5) as u8).min(15);
        let hi = (((x[j + 16] - min) * id + 0.5) as u8).min(15);
        out.push(lo | (hi << 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::ggml::dequantize;

    /// IQ4_NL blocks decode (ggml's arithmetic) near their input, better than the nearest
    /// table value under the plain `max / −127` scale, and the weighted search follows its
    /// weights: a column counted 100× more comes out closer.
    #[test]
    fn iq4_nl_searches_its_scale() {
        let x: Vec<f32> = (0..32 * 64)
            .map(|i| (((i * 7919) % 1013) as f32 / 1013.0 - 0.5) * (1.0 + (i % 5) as f32))
            .collect();
        let mut out = Vec::new();
        quantize(GgmlType::IQ4NL, &x, &mut out);
        assert_eq!(out.len(), 64 * 18);
        let mut back = vec![0.0; x.len()];
        dequantize(GgmlType::IQ4NL, &out, &mut back);
        let err = |b: &[f32]| x.iter().zip(b).map(|(a, b)| (a - b).powi(2)).sum::<f32>();
        // The unsearched scale: d = max / −127, each weight its nearest table value.
        let mut naive = Vec::new();
        for blk in x.chunks_exact(32) {
            let max = blk
                .iter()
                .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let d = max / -127.0;
            for &v in blk {
                naive.push(d * IQ4NL_VALUES[nearest(&IQ4NL_VALUES, v / d)] as f32);
            }
        }
        assert!(
            err(&back) < 0.9 * err(&naive),
            "{} vs {}",
            err(&back),
            err(&naive)
        );
        let mut imp = vec![1.0f32; 32];
        imp[3] = 100.0;
        let mut weighted = Vec::new();
        quantize_weighted(GgmlType::IQ4NL, &x, 32, Some(&imp), &mut weighted);
        let mut wb = vec![0.0; x.len()];
        dequantize(GgmlType::IQ4NL, &weighted, &mut wb);
        let col = |b: &[f32]| {
            (0..64)
                .map(|r| (x[r * 32 + 3] - b[r * 32 + 3]).powi(2))
                .sum::<f32>()
        };
        assert!(col(&wb) < col(&back), "{} vs {}", col(&wb), col(&back));
    }

    /// IQ4_XS super-blocks decode (ggml's arithmetic) with the table and 6-bit sub-block
    /// scales: each sub-block's error stays near IQ4_NL's own search (whose f16 scale per 32
    /// the shared scale approximates in 64 steps), an all-zero super-block writes a zero
    /// scale, and the weighted search follows its weights. (Byte equality with
    /// llama-quantize's own IQ4_XS is checked by scripts/check_iq4_llamacpp.py.)
    #[test]
    fn iq4_xs_shares_one_scale_in_six_bit_steps() {
        let x: Vec<f32> = (0..256 * 16)
            .map(|i| (((i * 7919) % 1013) as f32 / 1013.0 - 0.5) * (1.0 + (i / 32 % 5) as f32))
            .collect();
        let err = |ty: GgmlType| {
            let mut out = Vec::new();
            quantize(ty, &x, &mut out);
            assert_eq!(out.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
            let mut back = vec![0.0; x.len()];
            dequantize(ty, &out, &mut back);
            x.iter()
                .zip(&back)
                .map(|(a, b)| (a - b).powi(2))
                .sum::<f32>()
        };
        let (xs, nl) = (err(GgmlType::IQ4XS), err(GgmlType::IQ4NL));
        assert!(xs > 0.0 && xs < 1.15 * nl, "IQ4_XS {xs} vs IQ4_NL {nl}");
        let mut zero = Vec::new();
        quantize(GgmlType::IQ4XS, &[0.0; 256], &mut zero);
        let mut back = vec![1.0; 256];
        dequantize(GgmlType::IQ4XS, &zero, &mut back);
        assert!(back.iter().all(|v| *v == 0.0));
        let mut imp = vec![1.0f32; 256];
        imp[40] = 100.0;
        let (mut plain, mut weighted) = (Vec::new(), Vec::new());
        quantize_weighted(GgmlType::IQ4XS, &x, 256, None, &mut plain);
        quantize_weighted(GgmlType::IQ4XS, &x, 256, Some(&imp), &mut weighted);
        let col = |b: &[u8]| {
            let mut y = vec![0.0; x.len()];
            dequantize(GgmlType::IQ4XS, b, &mut y);
            (0..16)
                .map(|r| (x[r * 256 + 40] - y[r * 256 + 40]).powi(2))
                .sum::<f32>()
        };
        assert!(
            col(&weighted) < col(&plain),
            "{} vs {}",
            col(&weighted),
            col(&plain)
        );
    }

    /// With correlated inputs, every type the compensated writer takes (IQ4_XS's super-blocks of
    /// 256 too) lowers the output error `‖(w − ŵ)·X‖²` below the search alone's, in blocks
    /// ggml's own arithmetic decodes.
    #[test]
    fn compensation_lowers_the_output_error_of_every_type() {
        use crate::quant::gptq::testing::{correlated_inputs, gram, output_error, rng};
        use crate::quant::gptq::Compensation;
        let (n, t, rows) = (512, 1200, 8);
        let mut s = 77u64;
        // Inputs with strongly correlated neighbours, and a few loud columns.
        let x = correlated_inputs(&mut s, t, n, 0.8, Some(61));
        let h = gram(&x, n);
        let imp: Vec<f32> = (0..n).map(|i| (h[i * n + i] / t as f64) as f32).collect();
        let c = Compensation::from_gram(&h, n, t).unwrap();
        let w: Vec<f32> = (0..rows * n).map(|_| rng(&mut s)).collect();
        let out_err = |back: &[f32]| output_error(&w, back, &x, n);
        for ty in [
            GgmlType::IQ4XS,
            GgmlType::IQ4NL,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            let (mut plain, mut comp) = (Vec::new(), Vec::new());
            quantize_weighted(ty, &w, n, Some(&imp), &mut plain);
            quantize_compensated(ty, &w, n, Some(&imp), &c, &mut comp);
            let want = ty.bytes_for(w.len() as u64).unwrap();
            assert_eq!((plain.len() as u64, comp.len() as u64), (want, want));
            let decode = |b: &[u8]| {
                let mut y = vec![0.0; w.len()];
                dequantize(ty, b, &mut y);
                y
            };
            let (a, b) = (out_err(&decode(&plain)), out_err(&decode(&comp)));
            assert!(b < 0.8 * a, "{}: {b} compensated against {a}", ty.name());
        }
    }

    #[test]
    fn round_trips_within_half_a_step() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        for (ty, tol) in [
            (GgmlType::Q8_0, 1.3 / 127.0),
            // The largest magnitude maps to −8·d: the other sign clips by up to one step.
            (GgmlType::Q4_0, 2.0 * 1.3 / 8.0),
            (GgmlType::Q4_1, 2.6 / 15.0),
        ] {
            let mut b = Vec::new();
            quantize(ty, &x, &mut b);
            assert_eq!(b.len() as u64, ty.bytes_for(256).unwrap());
            let mut y = vec![0.0; 256];
            dequantize(ty, &b, &mut y);
            for (a, c) in x.iter().zip(&y) {
                assert!(
                    (a - c).abs() <= tol * 0.51 * 1.25 + 1e-3,
                    "{}: {a} vs {c}",
                    ty.name()
                );
            }
        }
    }
}
