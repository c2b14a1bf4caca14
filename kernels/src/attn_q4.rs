//! A 4-bit KV cache (`--kv q4`), kept to measure what llama.cpp's q4_0 cache costs a small
//! model: 4-bit codes with one f16 scale per position, KV head and block of 32 dimensions
//! (16 for heads of 16·odd), q4_0's rounding (the largest magnitude maps to −8). A quarter of
//! f16's bytes.
//!
//! It misses the quality bar the int8 cache meets (docs/performance.md, "Long context"), so
//! it is a default nowhere and has no SIMD kernels: attention over it is this scalar code,
//! on every ISA, with an f32 query. The layout is the int8 cache's (`attn_q8::key_at`,
//! `value_at`, `scale_at`) with two codes per byte: code index `n` is the low nibble of byte
//! `n / 2` when `n` is even, the high one when odd, stored as `code + 8`.

use super::attn::{fold_scalar, Running, TILE};
use super::attn_q8::{codes_against, key_at, scale_at, value_at};
use half::f16;

/// One KV head of a 4-bit cache.
#[derive(Clone, Copy)]
pub struct Q4Head<'a> {
    pub k: &'a [u8],
    pub ks: &'a [f16],
    pub v: &'a [u8],
    pub vs: &'a [f16],
    /// Dimensions per scale.
    pub block: usize,
}

/// Codes of `x` (in −8..=7) into `out` with one scale: q4_0's rule, the element of largest
/// magnitude `m` gives the scale `m / −8` (rounded to f16 first, so codes and the stored scale
/// agree), and codes round half up after the offset, as `(int)(x/scale + 8.5)` does.
pub fn quantize_q4(x: &[f32], out: &mut [i8]) -> f16 {
    let m = x
        .iter()
        .fold(0.0f32, |a, &b| if b.abs() > a.abs() { b } else { a });
    // Non-negative after the offset, so the cast truncates toward zero = floor.
    codes_against(f16::from_f32(m / -8.0), x, out, |y| {
        ((y + 8.5).clamp(0.0, 15.0) as i32 - 8) as i8
    })
}

/// The code at nibble index `n` of `buf`.
#[inline]
pub fn nibble(buf: &[u8], n: usize) -> i8 {
    let b = buf[n / 2];
    let u = if n % 2 == 0 { b & 0x0f } else { b >> 4 };
    u as i8 - 8
}

/// Stores `code` (−8..=7) at nibble index `n` of `buf`, leaving the other nibble.
#[inline]
pub fn set_nibble(buf: &mut [u8], n: usize, code: i8) {
    let u = (code + 8) as u8 & 0x0f;
    let b = &mut buf[n / 2];
    *b = if n % 2 == 0 {
        (*b & 0xf0) | u
    } else {
        (*b & 0x0f) | (u << 4)
    };
}

/// Bytes of a key or value buffer for `tiles` tiles of `d` dimensions.
pub fn buffer_bytes(tiles: usize, d: usize) -> usize {
    tiles * TILE * d / 2
}

/// Attends the query heads `q` (`g × d`, scaled) over positions `t0..t1` of `c`: the
/// dequantized keys' dot products and values, in f32.
pub fn span(q: &[f32], d: usize, c: Q4Head, t0: usize, t1: usize, run: &mut Running) {
    let (block, nb) = (c.block, d / c.block);
    let tiles = t1.div_ceil(TILE);
    assert!(
        d % block == 0
            && c.k.len() >= buffer_bytes(tiles, d)
            && c.v.len() >= buffer_bytes(tiles, d)
            && c.ks.len() >= tiles * TILE * nb
            && c.vs.len() >= tiles * TILE * nb
    );
    let score = |h: usize, t: usize| {
        let mut s = 0.0f32;
        for b in 0..nb {
            let dot: f32 = (b * block..(b + 1) * block)
                .map(|i| q[h * d + i] * nibble(c.k, key_at(d, t, i)) as f32)
                .sum();
            s += dot * c.ks[scale_at(nb, t, b)].to_f32();
        }
        s
    };
    let values = |acc: &mut [f32], _h: usize, tile: usize, valid: usize, p: &[f32; TILE]| {
        for (t, &pt) in p.iter().enumerate().take(valid) {
            for b in 0..nb {
                let w = pt * c.vs[scale_at(nb, tile + t, b)].to_f32();
                for (i, a) in acc.iter_mut().enumerate().skip(b * block).take(block) {
                    *a += w * nibble(c.v, value_at(d, tile + t, i)) as f32;
                }
            }
        }
    };
    fold_scalar(run, d, t0, t1, score, values);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn_q8::q8_block;
    use crate::testutil::Rng;

    #[test]
    fn codes_round_trip_within_half_a_step_and_pack_two_per_byte() {
        let mut rng = Rng(5);
        let x = rng.vec(32, 3.0);
        let mut q = [0i8; 32];
        let s = quantize_q4(&x, &mut q).to_f32();
        for (&a, &c) in x.iter().zip(&q) {
            assert!((-8..=7).contains(&c));
            // Half a step, but for values of the other sign than the largest one, which
            // q4_0 clips at 7 steps (a full step off at worst).
            let bound = if c == 7 { 1.0 } else { 0.5 };
            assert!(
                (a - c as f32 * s).abs() <= bound * s.abs() * 1.01,
                "{a} {c} {s}"
            );
        }
        // The largest magnitude is exactly −8 steps.
        assert!(q.contains(&-8));
        let mut buf = vec![0u8; 16];
        for (n, &c) in q.iter().enumerate() {
            set_nibble(&mut buf, n, c);
        }
        for (n, &c) in q.iter().enumerate() {
            assert_eq!(nibble(&buf, n), c);
        }
        assert_eq!(quantize_q4(&[0.0; 32], &mut q), f16::ZERO);
    }

    /// The kernel is a two-pass softmax over the dequantized cache, split and merged or not.
    #[test]
    fn span_equals_the_softmax_over_dequantized_keys_and_values() {
        let mut rng = Rng(13);
        for &(g, d, n) in &[(1, 32, 1usize), (7, 64, 37), (3, 48, 70), (4, 256, 45)] {
            let (block, tiles) = (q8_block(d).unwrap(), n.div_ceil(TILE));
            let nb = d / block;
            let mut k = vec![0u8; buffer_bytes(tiles, d)];
            let mut v = k.clone();
            let mut ks = vec![f16::ZERO; tiles * TILE * nb];
            let mut vs = ks.clone();
            let (mut kf, mut vf) = (vec![0.0f32; n * d], vec![0.0f32; n * d]);
            let mut codes = vec![0i8; block];
            for t in 0..n {
                let (kx, vx) = (rng.vec(d, 2.0), rng.vec(d, 1.0));
                for b in 0..nb {
                    let r = b * block..(b + 1) * block;
                    let s = quantize_q4(&kx[r.clone()], &mut codes);
                    ks[scale_at(nb, t, b)] = s;
                    for (j, &c) in codes.iter().enumerate() {
                        set_nibble(&mut k, key_at(d, t, r.start + j), c);
                        kf[t * d + r.start + j] = c as f32 * s.to_f32();
                    }
                    let s = quantize_q4(&vx[r.clone()], &mut codes);
                    vs[scale_at(nb, t, b)] = s;
                    for (j, &c) in codes.iter().enumerate() {
                        set_nibble(&mut v, value_at(d, t, r.start + j), c);
                        vf[t * d + r.start + j] = c as f32 * s.to_f32();
                    }
                }
            }
            let head = Q4Head {
                k: &k,
                ks: &ks,
                v: &v,
                vs: &vs,
                block,
            };
            let q = rng.vec(g * d, 0.5);
            let mut want = vec![0.0f32; g * d];
            for h in 0..g {
                let s: Vec<f64> = (0..n)
                    .map(|t| {
                        (0..d)
                            .map(|i| q[h * d + i] as f64 * kf[t * d + i] as f64)
                            .sum()
                    })
                    .collect();
                let m = s.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let l: f64 = e.iter().sum();
                for i in 0..d {
                    let o: f64 = (0..n).map(|t| e[t] * vf[t * d + i] as f64).sum();
                    want[h * d + i] = (o / l) as f32;
                }
            }
            let cut = n / 2;
            let mut a = Running::new(g, d);
            span(&q, d, head, 0, cut, &mut a);
            let mut b = Running::new(g, d);
            span(&q, d, head, cut, n, &mut b);
            a.merge(&b);
            let mut whole = Running::new(g, d);
            span(&q, d, head, 0, n, &mut whole);
            for r in [&whole, &a] {
                let mut got = vec![0.0; g * d];
                r.finish(&mut got);
                for (x, y) in got.iter().zip(&want) {
                    assert!((x - y).abs() <= 1e-4, "g{g} d{d} n{n}: {x} vs {y}");
                }
            }
        }
    }
}
