//! Attention over the KV cache, one KV head's query group at a time, with an online (running)
//! softmax over tiles of 16 positions: flash-decoding. Memory stays bounded at any context
//! length, a span of positions can be split across threads and merged, and every cached key
//! and value is read once per step for the whole group.
//!
//! Keys are stored tile-transposed (`[tile][dim][16 positions]`), so one tile's scores for a
//! query head are 16 lanes of FMAs with no horizontal sums; values are stored row per
//! position. Both in f16 (the default cache) or f32 (the exact reference), or in int8 with an
//! f16 scale per block of dimensions (`attn_q8`: half the bytes of f16, integer scores).

use super::attn_q4;
pub use super::attn_q4::{quantize_q4, Q4Head};
use super::attn_q8::{self, QuantQuery};
pub use super::attn_q8::{q8_block, quantize_q8, Q8Head};
use super::{Cpu, Isa};
use half::f16;

/// Positions per key tile.
pub const TILE: usize = 16;

/// One KV head's cached keys (tile-transposed) and values (row per position).
#[derive(Clone, Copy)]
pub enum KvHead<'a> {
    F32 {
        k: &'a [f32],
        v: &'a [f32],
    },
    F16 {
        k: &'a [f16],
        v: &'a [f16],
    },
    /// int8 codes, keys in quads of dimensions per tile (see [`Q8Head`]).
    Q8(Q8Head<'a>),
    /// 4-bit codes in the int8 layout, two per byte (see [`Q4Head`]): scalar attention only.
    Q4(Q4Head<'a>),
}

/// The running state of a span: per query head a reference score `m` (the max seen, or up to
/// [`RESCALE_AT`] below it), the sum of `exp(s − m)` `l`, and the unnormalised output `acc`
/// (head after head).
#[derive(Clone, Debug)]
pub struct Running {
    pub m: Vec<f32>,
    pub l: Vec<f32>,
    pub acc: Vec<f32>,
}

impl Running {
    pub fn new(g: usize, d: usize) -> Running {
        Running {
            m: vec![f32::NEG_INFINITY; g],
            l: vec![0.0; g],
            acc: vec![0.0; g * d],
        }
    }

    /// Folds another span's state into this one (the spans are disjoint).
    pub fn merge(&mut self, o: &Running) {
        let d = self.acc.len() / self.m.len();
        for h in 0..self.m.len() {
            if o.l[h] == 0.0 {
                continue;
            }
            let m = self.m[h].max(o.m[h]);
            let (a, b) = (exp(self.m[h] - m), exp(o.m[h] - m));
            self.l[h] = self.l[h] * a + o.l[h] * b;
            for (x, y) in self.acc[h * d..(h + 1) * d].iter_mut().zip(&o.acc[h * d..]) {
                *x = *x * a + y * b;
            }
            self.m[h] = m;
        }
    }

    /// The normalised outputs, `g × d`.
    pub fn finish(&self, out: &mut [f32]) {
        let d = self.acc.len() / self.m.len();
        for h in 0..self.m.len() {
            let inv = if self.l[h] > 0.0 {
                1.0 / self.l[h]
            } else {
                0.0
            };
            for (o, a) in out[h * d..(h + 1) * d].iter_mut().zip(&self.acc[h * d..]) {
                *o = a * inv;
            }
        }
    }
}

/// Attends the query heads `q` (`g × d`, already multiplied by the softmax scale) over
/// positions `t0..t1` of `kv`, folding them into `run`. A `t0` inside a tile (a sliding
/// window's start) takes the scalar twin up to the next tile edge.
pub fn span(cpu: Cpu, q: &[f32], d: usize, kv: KvHead, t0: usize, t1: usize, run: &mut Running) {
    let g = run.m.len();
    assert!(q.len() == g * d && run.acc.len() == g * d && t0 <= t1);
    if let KvHead::Q8(c) = kv {
        let qq = QuantQuery::new(q, g, d, c.block);
        return attn_q8::span(cpu, &qq, d, c, t0, t1, run);
    }
    if let KvHead::Q4(c) = kv {
        return attn_q4::span(q, d, c, t0, t1, run);
    }
    let edge = t0.next_multiple_of(TILE).min(t1);
    if edge > t0 {
        span_scalar(q, d, kv, t0, edge, run);
    }
    let t0 = edge;
    if t0 == t1 {
        return;
    }
    let (klen, vlen) = match kv {
        KvHead::F32 { k, v } => (k.len(), v.len()),
        KvHead::F16 { k, v } => (k.len(), v.len()),
        KvHead::Q8(_) | KvHead::Q4(_) => unreachable!("int8 and 4-bit caches return above"),
    };
    assert!(klen >= t1.div_ceil(TILE) * TILE * d && vlen >= t1 * d);
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if d % 32 == 0 => {
            // SAFETY: the CPU has AVX-512 F and F16C (the `Cpu` token proves it); the buffer lengths
            // cover every tile of the span (asserted above).
            unsafe { super::x86::avx512::attn::span(q, d, kv, t0, t1, run) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 | Isa::Amx if d % 16 == 0 => {
            // SAFETY: as above, for AVX2, FMA and F16C.
            unsafe { super::x86::avx2::attn::span(q, d, kv, t0, t1, run) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::Dotprod | Isa::I8mm if d % 16 == 0 => {
            // SAFETY: the CPU has NEON (the `Cpu` token proves it); the buffer lengths cover
            // every tile of the span (asserted above).
            unsafe { super::aarch64::attn::span(q, d, kv, t0, t1, run) }
        }
        _ => span_scalar(q, d, kv, t0, t1, run),
    }
}

/// The scalar twin: the definition the SIMD versions follow tile by tile.
pub fn span_scalar(q: &[f32], d: usize, kv: KvHead, t0: usize, t1: usize, run: &mut Running) {
    if let KvHead::Q8(c) = kv {
        let qq = QuantQuery::new(q, run.m.len(), d, c.block);
        return attn_q8::span_scalar(&qq, d, c, t0, t1, run);
    }
    if let KvHead::Q4(c) = kv {
        return attn_q4::span(q, d, c, t0, t1, run);
    }
    let key = |t: usize, i: usize| {
        let at = (t / TILE * d + i) * TILE + t % TILE;
        match kv {
            KvHead::F32 { k, .. } => k[at],
            KvHead::F16 { k, .. } => k[at].to_f32(),
            KvHead::Q8(_) | KvHead::Q4(_) => unreachable!(),
        }
    };
    let value = |t: usize, i: usize| match kv {
        KvHead::F32 { v, .. } => v[t * d + i],
        KvHead::F16 { v, .. } => v[t * d + i].to_f32(),
        KvHead::Q8(_) | KvHead::Q4(_) => unreachable!(),
    };
    let score = |h: usize, t: usize| (0..d).map(|i| q[h * d + i] * key(t, i)).sum();
    let values = |acc: &mut [f32], _h: usize, tile: usize, valid: usize, p: &[f32; TILE]| {
        for (i, a) in acc.iter_mut().enumerate() {
            for (lane, &pl) in p.iter().enumerate().take(valid) {
                *a += pl * value(tile + lane, i);
            }
        }
    };
    fold_scalar(run, d, t0, t1, score, values);
}

/// The scalar online softmax over tiles of `t0..t1`, given each (head, position)'s score and
/// how a tile's weights `p` add its values into a head's accumulator: what every cache type
/// and ISA computes.
pub(crate) fn fold_scalar(
    run: &mut Running,
    d: usize,
    t0: usize,
    t1: usize,
    score: impl Fn(usize, usize) -> f32,
    values: impl Fn(&mut [f32], usize, usize, usize, &[f32; TILE]),
) {
    let g = run.m.len();
    let mut tile = t0;
    while tile < t1 {
        let valid = TILE.min(t1 - tile);
        for h in 0..g {
            let mut s = [f32::NEG_INFINITY; TILE];
            for (lane, sl) in s.iter_mut().enumerate().take(valid) {
                *sl = score(h, tile + lane);
            }
            // Lazy rescaling: the reference max `m` moves only when a score passes it by more
            // than RESCALE_AT, so the exponentials stay below e^RESCALE_AT and most tiles skip
            // the max reduction and the rescale of `l` and `acc`.
            let mx = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            if mx > run.m[h] + RESCALE_AT {
                let corr = exp(run.m[h] - mx);
                run.l[h] *= corr;
                run.acc[h * d..(h + 1) * d]
                    .iter_mut()
                    .for_each(|a| *a *= corr);
                run.m[h] = mx;
            }
            let m = run.m[h];
            let p: [f32; TILE] = s.map(|x| exp(x - m));
            run.l[h] += p[..valid].iter().sum::<f32>();
            values(&mut run.acc[h * d..(h + 1) * d], h, tile, valid, &p);
        }
        tile += TILE;
    }
}

/// How far (in natural-log units) a score may pass the running reference max before the
/// running state is rescaled: exponentials stay below e^8 ≈ 2981, far from f32 overflow even
/// when summed over 40K positions.
pub(crate) const RESCALE_AT: f32 = 8.0;

/// `e^x` by range reduction to `2^n · e^r` (|r| ≤ ln2/2) and a degree-6 polynomial: within
/// 2 ulp of the true value on [−87, 88], 0 below (−∞ included), the same operations as the
/// SIMD versions so every path rounds alike.
#[inline]
pub fn exp(x: f32) -> f32 {
    if x < EXP_LO {
        return 0.0;
    }
    let x = x.min(EXP_HI);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p * r + c;
    }
    let e = p * r * r + r + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

pub(crate) const EXP_LO: f32 = -87.0;
pub(crate) const EXP_HI: f32 = 88.0;
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes expf's coefficients for `(e^r − 1 − r) / r²`.
pub(crate) const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn exp_is_close_to_std() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp(x), x.exp());
            assert!((a - b).abs() <= 3e-7 * b, "{x}: {a} {b}");
            x += 0.0137;
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    /// Builds one KV head's cache of `n` positions in both layouts' element types.
    fn cache(rng: &mut Rng, n: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
        let tiles = n.div_ceil(TILE);
        let mut k = vec![0.0; tiles * TILE * d];
        let v = rng.vec(n * d, 1.0);
        for t in 0..n {
            for i in 0..d {
                k[(t / TILE * d + i) * TILE + t % TILE] = rng.f32() * 2.0;
            }
        }
        (k, v)
    }

    /// Every path, whole or split into spans and merged, equals the two-pass softmax.
    #[test]
    fn every_isa_matches_two_pass_softmax() {
        let mut rng = Rng(21);
        for &(g, d, n) in &[
            (1, 16, 1),
            (3, 64, 37),
            (7, 64, 130),
            (2, 128, 16),
            (5, 32, 200),
            // A short span and a partial last tile after two full ones.
            (4, 64, 20),
            (8, 32, 53),
        ] {
            let (k, v) = cache(&mut rng, n, d);
            // A wide spread of scores (scale 4) moves the running max many times, past and
            // within the lazy-rescale margin.
            for q_scale in [0.3, 4.0] {
                let q = rng.vec(g * d, q_scale);
                let key = |t: usize, i: usize| k[(t / TILE * d + i) * TILE + t % TILE];
                let mut want = vec![0.0f32; g * d];
                for h in 0..g {
                    let s: Vec<f32> = (0..n)
                        .map(|t| (0..d).map(|i| q[h * d + i] * key(t, i)).sum())
                        .collect();
                    let m = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                    let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
                    let l: f32 = e.iter().sum();
                    for i in 0..d {
                        want[h * d + i] = (0..n).map(|t| e[t] * v[t * d + i]).sum::<f32>() / l;
                    }
                }
                let k16: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
                let v16: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
                for isa in crate::available() {
                    for half in [false, true] {
                        let kv = if half {
                            KvHead::F16 { k: &k16, v: &v16 }
                        } else {
                            KvHead::F32 { k: &k, v: &v }
                        };
                        let tol = if half { 2e-2 } else { 1e-5 };
                        // Whole, and split at a tile boundary then merged.
                        let mut whole = Running::new(g, d);
                        span(isa, &q, d, kv, 0, n, &mut whole);
                        let cut = (n / 2) / TILE * TILE;
                        let mut a = Running::new(g, d);
                        span(isa, &q, d, kv, 0, cut, &mut a);
                        let mut b = Running::new(g, d);
                        span(isa, &q, d, kv, cut, n, &mut b);
                        a.merge(&b);
                        for r in [&whole, &a] {
                            let mut got = vec![0.0; g * d];
                            r.finish(&mut got);
                            for (x, y) in got.iter().zip(&want) {
                                assert!(
                                    (x - y).abs() <= tol,
                                    "{isa:?} g{g} d{d} n{n} f16={half}: {x} {y}"
                                );
                            }
                        }
                        // The SIMD path against the scalar twin on the same cache.
                        let mut twin = Running::new(g, d);
                        span_scalar(&q, d, kv, 0, n, &mut twin);
                        let (mut got, mut exact) = (vec![0.0; g * d], vec![0.0; g * d]);
                        whole.finish(&mut got);
                        twin.finish(&mut exact);
                        for (x, y) in got.iter().zip(&exact) {
                            assert!(
                                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                                "{isa:?} twin {x} {y}"
                            );
                        }
                    }
                }
            }
        }
    }
}
