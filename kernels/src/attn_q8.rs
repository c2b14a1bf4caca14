//! Attention over an int8 KV cache (`--kv q8`): keys and values as int8 codes with one f16
//! scale per position, KV head and block of 32 dimensions (16 for heads of 16·odd), the
//! granularity of llama.cpp's q8_0. Half the bytes of an f16 cache, which decode at depth
//! reads in full every step.
//!
//! Scores are integer dot products: the query is quantized the same way (per head and block,
//! an f32 scale) once per span, and a block's `Σ q·k` is exact in i32 on every ISA (VNNI
//! `vpdpbusd`, AVX2 `vpmaddubsw`, NEON `smull`/`sdot`); only the scaling to f32 differs by
//! rounding. The softmax is the f16 kernel's, shared.
//!
//! Values are summed in integers too. A tile's softmax weights, times each position's value
//! scale, are quantized per head and block to u8 codes against their maximum (`weight_codes`,
//! round to nearest even: the same codes on every ISA), and `Σ_t code_t · v_t` is exact
//! (`vpdpbusd`; AVX2 and NEON sum the same integers in f32, exact below 2^24). The weights'
//! sum (the softmax's denominator) stays in f32. Against the f16 kernel this replaces the
//! value loop's 16 FMAs per head and 16 dimensions with 4 `vpdpbusd`: the value loop was half
//! of decode attention's time.
//!
//! Layout, chosen so one 64-byte load is what `vpdpbusd` (16 lanes × 4 bytes) and `sdot`
//! (4 × 4 lanes × 4 bytes) take:
//! - keys `[tile][d/4 quads][16 positions][4 dims]` (16 scores, 4 dimensions);
//! - values `[tile][4 position quads][d][4 positions]` (16 dimensions, 4 positions);
//! - key and value scales `[tile][d/block][16 positions]`.

use super::attn::{fold_scalar, Running, TILE};
use super::{Cpu, Isa};
use half::f16;

/// One KV head of an int8 cache (layout in the module doc).
#[derive(Clone, Copy)]
pub struct Q8Head<'a> {
    pub k: &'a [i8],
    pub ks: &'a [f16],
    pub v: &'a [i8],
    pub vs: &'a [f16],
    /// Dimensions per scale.
    pub block: usize,
}

/// The scale block for heads of `d` dimensions: 32, or 16 when `d` is an odd multiple of 16;
/// `None` (no int8 cache) otherwise.
pub fn q8_block(d: usize) -> Option<usize> {
    if d % 32 == 0 {
        Some(32)
    } else if d % 16 == 0 {
        Some(16)
    } else {
        None
    }
}

/// Codes of `x` into `out` with one scale, `max|x| / 127` rounded to f16 first, so codes
/// and the stored scale agree (a code never exceeds ±127).
pub fn quantize_q8(x: &[f32], out: &mut [i8]) -> f16 {
    let amax = x.iter().fold(0.0f32, |a, &b| a.max(b.abs()));
    codes_against(f16::from_f32(amax / 127.0), x, out, round_code)
}

/// Codes `code(x / scale)` of `x` into `out` against a scale already rounded to f16 (what is
/// stored), or all zeros with a zero scale when it is zero or not finite (the int8 and the
/// 4-bit cache).
#[inline]
pub(crate) fn codes_against(
    scale: f16,
    x: &[f32],
    out: &mut [i8],
    code: impl Fn(f32) -> i8,
) -> f16 {
    let s = scale.to_f32();
    if s == 0.0 || !s.is_finite() {
        out.fill(0);
        return if s.is_finite() { scale } else { f16::ZERO };
    }
    let inv = 1.0 / s;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = code(v * inv);
    }
    scale
}

/// `x` rounded half away from zero to a code in ±127, without `f32::round` (a libm call on
/// x86-64's baseline, once per element of every key, value and query).
#[inline]
fn round_code(x: f32) -> i8 {
    ((x + 0.5f32.copysign(x)) as i32).clamp(-127, 127) as i8
}

/// A group's query heads as int8 codes per block, with each block's scale and the sum of its
/// codes (VNNI multiplies unsigned by signed bytes: keys shifted by 128 add `128·Σq`, which
/// this sum takes back out).
pub struct QuantQuery {
    pub q: Vec<i8>,
    pub scale: Vec<f32>,
    pub sum: Vec<i32>,
    pub block: usize,
}

impl QuantQuery {
    pub fn new(q: &[f32], g: usize, d: usize, block: usize) -> QuantQuery {
        let nb = d / block;
        let mut out = QuantQuery {
            q: vec![0; g * d],
            scale: vec![0.0; g * nb],
            sum: vec![0; g * nb],
            block,
        };
        for (b, x) in q.chunks_exact(block).enumerate().take(g * nb) {
            let codes = &mut out.q[b * block..(b + 1) * block];
            let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
            if amax > 0.0 && amax.is_finite() {
                let inv = 127.0 / amax;
                for (o, &v) in codes.iter_mut().zip(x) {
                    *o = round_code(v * inv);
                }
                out.scale[b] = amax / 127.0;
            }
            out.sum[b] = codes.iter().map(|&c| c as i32).sum();
        }
        out
    }
}

/// Byte index of position `t`, dimension `i` in a key buffer.
#[inline]
pub fn key_at(d: usize, t: usize, i: usize) -> usize {
    t / TILE * d * TILE + i / 4 * TILE * 4 + t % TILE * 4 + i % 4
}

/// Byte index of position `t`, dimension `i` in a value buffer.
#[inline]
pub fn value_at(d: usize, t: usize, i: usize) -> usize {
    t / TILE * d * TILE + t % TILE / 4 * d * 4 + i * 4 + t % 4
}

/// A tile's weights for one block of values: `p_t · sv_t` (softmax weight times value scale)
/// as u8 codes against their maximum, and the scale a code stands for. Positions from `valid`
/// on weigh nothing. Every ISA takes these codes (the same float operations).
pub fn weight_codes(p: &[f32; TILE], sv: &[f32; TILE], valid: usize) -> ([u8; TILE], f32) {
    let mut w = [0.0f32; TILE];
    for t in 0..valid {
        w[t] = p[t] * sv[t];
    }
    let mx = w.iter().fold(0.0f32, |a, &b| a.max(b));
    if !(mx > 0.0 && mx.is_finite()) {
        return ([0; TILE], 0.0);
    }
    let inv = 255.0 / mx;
    (
        w.map(|x| (x * inv).round_ties_even().clamp(0.0, 255.0) as u8),
        mx / 255.0,
    )
}

/// Index of position `t`, block `b` in a key- or value-scale buffer of `nb` blocks per
/// position.
#[inline]
pub fn scale_at(nb: usize, t: usize, b: usize) -> usize {
    t / TILE * nb * TILE + b * TILE + t % TILE
}

/// Attends positions `t0..t1` (as `kernels::attn::span`, whose checks have run).
pub(crate) fn span(
    cpu: Cpu,
    qq: &QuantQuery,
    d: usize,
    c: Q8Head,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    let nb = d / c.block;
    assert!(d % c.block == 0 && c.block % 16 == 0 && qq.block == c.block);
    let edge = t0.next_multiple_of(TILE).min(t1);
    if edge > t0 {
        span_scalar(qq, d, c, t0, edge, run);
    }
    let t0 = edge;
    if t0 == t1 {
        return;
    }
    let tiles = t1.div_ceil(TILE);
    assert!(
        c.k.len() >= tiles * TILE * d
            && c.ks.len() >= tiles * TILE * nb
            && c.v.len() >= tiles * TILE * d
            && c.vs.len() >= tiles * TILE * nb
    );
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if d % 32 == 0 && d <= 256 => {
            // SAFETY: the CPU has AVX-512 F/BW, VNNI and F16C (the `Cpu` token proves it); the
            // buffer lengths cover every tile of the span (asserted above).
            unsafe { super::x86::avx512::attn::span_q8(qq, d, c, t0, t1, run) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 | Isa::Amx => {
            // SAFETY: as above, for AVX2, FMA and F16C.
            unsafe { super::x86::avx2::attn::span_q8(qq, d, c, t0, t1, run) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => {
            // SAFETY: the CPU has NEON (the `Cpu` token proves it); lengths asserted above.
            unsafe { super::aarch64::attn::span_q8::<super::aarch64::Neon>(qq, d, c, t0, t1, run) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod | Isa::I8mm => {
            // SAFETY: as above; the token proves dotprod too.
            unsafe { super::aarch64::attn::span_q8_dotprod(qq, d, c, t0, t1, run) }
        }
        _ => span_scalar(qq, d, c, t0, t1, run),
    }
}

/// The scalar twin: a block's exact integer dot product times the query's and the key's
/// scales, summed over blocks; a tile's values are summed against its weight codes.
pub fn span_scalar(qq: &QuantQuery, d: usize, c: Q8Head, t0: usize, t1: usize, run: &mut Running) {
    let (block, nb) = (c.block, d / c.block);
    let score = |h: usize, t: usize| {
        let mut s = 0.0f32;
        for b in 0..nb {
            let dot: i32 = (b * block..(b + 1) * block)
                .map(|i| qq.q[h * d + i] as i32 * c.k[key_at(d, t, i)] as i32)
                .sum();
            s += dot as f32 * (qq.scale[h * nb + b] * c.ks[scale_at(nb, t, b)].to_f32());
        }
        s
    };
    let values = |acc: &mut [f32], _h: usize, tile: usize, valid: usize, p: &[f32; TILE]| {
        for b in 0..nb {
            let mut sv = [0.0f32; TILE];
            for (t, x) in sv.iter_mut().enumerate().take(valid) {
                *x = c.vs[scale_at(nb, tile + t, b)].to_f32();
            }
            let (codes, scale) = weight_codes(p, &sv, valid);
            if scale == 0.0 {
                continue;
            }
            for (i, a) in acc.iter_mut().enumerate().skip(b * block).take(block) {
                let sum: i32 = (0..valid)
                    .map(|t| codes[t] as i32 * c.v[value_at(d, tile + t, i)] as i32)
                    .sum();
                *a += sum as f32 * scale;
            }
        }
    };
    // Weights are coded per tile of the cache: a start inside one (a sliding window's) takes
    // the rest of that tile first, as the SIMD paths do.
    let edge = t0.next_multiple_of(TILE).min(t1);
    fold_scalar(run, d, t0, edge, &score, &values);
    fold_scalar(run, d, edge, t1, score, values);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn::{self, KvHead};
    use crate::testutil::Rng;

    /// An int8 cache of `n` positions for one KV head, and the f32 values it stands for.
    struct Cache {
        k: Vec<i8>,
        ks: Vec<f16>,
        v: Vec<i8>,
        vs: Vec<f16>,
        kf: Vec<f32>,
        vf: Vec<f32>,
    }

    fn cache(rng: &mut Rng, n: usize, d: usize, block: usize) -> Cache {
        let (tiles, nb) = (n.div_ceil(TILE), d / block);
        let mut c = Cache {
            k: vec![0; tiles * TILE * d],
            ks: vec![f16::ZERO; tiles * TILE * nb],
            v: vec![0; tiles * TILE * d],
            vs: vec![f16::ZERO; tiles * TILE * nb],
            kf: vec![0.0; n * d],
            vf: vec![0.0; n * d],
        };
        let mut codes = vec![0i8; block];
        for t in 0..n {
            // Rows of very different sizes, as keys with outlier channels have.
            let size = 0.1 + 3.0 * rng.f32().abs();
            let (kx, vx) = (rng.vec(d, size), rng.vec(d, 1.0));
            for b in 0..nb {
                let r = b * block..(b + 1) * block;
                let s = quantize_q8(&kx[r.clone()], &mut codes);
                c.ks[scale_at(nb, t, b)] = s;
                for (j, &q) in codes.iter().enumerate() {
                    c.k[key_at(d, t, b * block + j)] = q;
                    c.kf[t * d + b * block + j] = q as f32 * s.to_f32();
                }
                let s = quantize_q8(&vx[r.clone()], &mut codes);
                c.vs[scale_at(nb, t, b)] = s;
                for (j, &q) in codes.iter().enumerate() {
                    c.v[value_at(d, t, b * block + j)] = q;
                    c.vf[t * d + b * block + j] = q as f32 * s.to_f32();
                }
            }
        }
        c
    }

    #[test]
    fn codes_round_trip_within_half_a_step() {
        let mut rng = Rng(3);
        let x = rng.vec(32, 5.0);
        let mut q = [0i8; 32];
        let s = quantize_q8(&x, &mut q).to_f32();
        for (&a, &c) in x.iter().zip(&q) {
            assert!((a - c as f32 * s).abs() <= 0.5 * s * 1.01, "{a} {c} {s}");
        }
        assert!(q.iter().any(|&c| c.abs() >= 126));
        assert_eq!(quantize_q8(&[0.0; 32], &mut q), f16::ZERO);
        assert!(q.iter().all(|&c| c == 0));
        assert_eq!(q8_block(64), Some(32));
        assert_eq!(q8_block(48), Some(16));
        assert_eq!(q8_block(24), None);
    }

    /// Every ISA's int8 kernel equals the scalar twin on odd sizes, whole and split at a tile
    /// edge and merged, starting inside a tile; and the twin is attention over the dequantized
    /// keys and values with the query's own rounding, within that rounding.
    #[test]
    fn every_isa_matches_the_scalar_twin_and_the_dequantized_softmax() {
        let mut rng = Rng(77);
        for &(g, d, n) in &[
            (1, 32, 1),
            (7, 64, 37),
            (3, 64, 130),
            (4, 256, 45),
            (2, 48, 70),
            (8, 32, 53),
            (9, 64, 200),
            (5, 16, 33),
        ] {
            let block = q8_block(d).unwrap();
            let c = cache(&mut rng, n, d, block);
            let head = Q8Head {
                k: &c.k,
                ks: &c.ks,
                v: &c.v,
                vs: &c.vs,
                block,
            };
            for q_scale in [0.3, 3.0] {
                let q = rng.vec(g * d, q_scale);
                // Reference: f32 softmax over the dequantized cache with the quantized query.
                let qq = QuantQuery::new(&q, g, d, block);
                let qf: Vec<f32> = (0..g * d)
                    .map(|i| qq.q[i] as f32 * qq.scale[i / block])
                    .collect();
                let mut want = vec![0.0f32; g * d];
                for h in 0..g {
                    let s: Vec<f64> = (0..n)
                        .map(|t| {
                            (0..d)
                                .map(|i| qf[h * d + i] as f64 * c.kf[t * d + i] as f64)
                                .sum()
                        })
                        .collect();
                    let m = s.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let l: f64 = e.iter().sum();
                    for i in 0..d {
                        let o: f64 = (0..n).map(|t| e[t] * c.vf[t * d + i] as f64).sum();
                        want[h * d + i] = (o / l) as f32;
                    }
                }
                let finish = |r: &Running| {
                    let mut out = vec![0.0; g * d];
                    r.finish(&mut out);
                    out
                };
                let mut twin = Running::new(g, d);
                span_scalar(&qq, d, head, 0, n, &mut twin);
                let twin = finish(&twin);
                // The weights' u8 codes err by at most half a step of their tile's largest
                // weight: about a percent of the values' range at worst (a tile with one
                // dominant position and fifteen small ones).
                let worst = twin
                    .iter()
                    .zip(&want)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                assert!(worst <= 1e-2, "twin g{g} d{d} n{n}: off by {worst}");
                for cpu in crate::available() {
                    let kv = KvHead::Q8(head);
                    let mut whole = Running::new(g, d);
                    attn::span(cpu, &q, d, kv, 0, n, &mut whole);
                    // Split at a tile edge and merged (how decoding splits a long context).
                    // The weights are coded per tile, so tiles must be the same ones.
                    let cut = (n / 2) / TILE * TILE;
                    let mut a = Running::new(g, d);
                    attn::span(cpu, &q, d, kv, 0, cut, &mut a);
                    let mut b = Running::new(g, d);
                    attn::span(cpu, &q, d, kv, cut, n, &mut b);
                    a.merge(&b);
                    for r in [&whole, &a] {
                        for (x, y) in finish(r).iter().zip(&twin) {
                            assert!(
                                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                                "{cpu:?} g{g} d{d} n{n}: {x} vs twin {y}"
                            );
                        }
                    }
                    // A start inside a tile (a sliding window's): the scalar edge, then tiles.
                    if n > 5 {
                        let mut from5 = Running::new(g, d);
                        attn::span(cpu, &q, d, kv, 5, n, &mut from5);
                        let mut twin5 = Running::new(g, d);
                        span_scalar(&qq, d, head, 5, n, &mut twin5);
                        for (x, y) in finish(&from5).iter().zip(&finish(&twin5)) {
                            assert!(
                                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                                "{cpu:?} from 5 g{g} d{d} n{n}: {x} vs twin {y}"
                            );
                        }
                    }
                }
            }
        }
    }
}
