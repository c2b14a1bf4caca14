//! The 16-row interleaved Q8 layout (see `kernels::q8_packed`) with NEON, dotprod and i8mm.
//! The stored codes are offset by 128 for `vpdpbusd`'s unsigned operand; ARM's `sdot` and
//! `smmla` are signed × signed, so one `eor 0x80` per register gives the codes back and no
//! `128·Σx` correction is needed.
//!
//! - NEON/dotprod: lane `k` of code vector `i` holds codes `4i..4i+4` of row `k`, so code
//!   vector `i0 + j` meets lane `j` of the 16 activation bytes at `4·i0` (`sdot … .4b[j]`).
//! - i8mm: zipping the 32-bit lanes of vectors `i` and `i + 1` puts two rows' codes
//!   `4i..4i+8` in the two halves of a register, and two tokens' activations `4i..4i+8` are
//!   one load each: one `smmla` per row pair and token pair, no other shuffle.

use super::{smmla, Dot};
use crate::act::QuantActs;
use crate::q8_packed::PackedQ8;

use std::arch::aarch64::*;

/// # Safety
/// The CPU must have what `D` needs, and this must be called from a function compiled with
/// it; arguments as checked by `q8_packed::dot_rows_tokens`.
#[inline(always)]
unsafe fn dot_rows_tokens<D: Dot>(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    super::each_tile(first, count, acts.len(), &[2, 1], |g, col, t0, w| {
        let ts = &acts[t0..t0 + w];
        // SAFETY: as this function's; the tile's tokens and the group's outputs exist.
        unsafe {
            if w == 2 {
                group::<D, 2, 1>(p, g, ts, out, count, col, t0)
            } else {
                group::<D, 1, 2>(p, g, ts, out, count, col, t0)
            }
        }
    });
}

/// The dotprod level.
///
/// # Safety
/// As [`dot_rows_tokens`], on a CPU with dotprod.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn dot_rows_tokens_dotprod(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    dot_rows_tokens::<super::Sdot>(p, first, count, acts, out)
}

/// The baseline NEON level.
///
/// # Safety
/// As [`dot_rows_tokens`].
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_rows_tokens_neon(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    dot_rows_tokens::<super::Neon>(p, first, count, acts, out)
}

/// `D::dot` with lane `j` (a constant once the caller's loop is unrolled).
#[inline(always)]
unsafe fn dot_lane<D: Dot>(j: usize, acc: int32x4_t, c: int8x16_t, x: int8x16_t) -> int32x4_t {
    match j {
        0 => D::dot::<0>(acc, c, x),
        1 => D::dot::<1>(acc, c, x),
        2 => D::dot::<2>(acc, c, x),
        _ => D::dot::<3>(acc, c, x),
    }
}

/// The 16 rows' f16 scales of a block, four per register.
///
/// # Safety
/// `pr` points at 32 bytes of f16 scales.
#[inline(always)]
unsafe fn scales(pr: *const u8) -> [float32x4_t; 4] {
    let (a, b) = (vld1q_u16(pr.cast()), vld1q_u16(pr.add(16).cast()));
    [
        super::f16_lo(a),
        super::f16_hi(a),
        super::f16_lo(b),
        super::f16_hi(b),
    ]
}

/// One group of 16 rows against `T` tokens, `C` accumulator chains per row quad and token.
///
/// # Safety
/// As [`dot_rows_tokens`]; `T == ts.len()`, outputs `col..col + 16` of each token in range.
#[inline(always)]
unsafe fn group<D: Dot, const T: usize, const C: usize>(
    p: &PackedQ8,
    g: usize,
    ts: &[QuantActs],
    out: &mut [f32],
    count: usize,
    col: usize,
    t0: usize,
) {
    let (nb, rec, block) = (p.blocks(), p.record(), p.block);
    let dw = block / 4;
    let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
    let flip = vdupq_n_u8(0x80);
    let base = p.data.as_ptr().add(g * nb * rec);
    let mut acc = [[vdupq_n_f32(0.0); 4]; T];
    for b in 0..nb {
        let r = base.add(b * rec);
        let mut d = [[[vdupq_n_s32(0); C]; 4]; T];
        for i0 in (0..dw).step_by(4) {
            let mut x = [vdupq_n_s8(0); T];
            for (t, a) in ts.iter().enumerate() {
                // SAFETY: activation dwords i0..i0 + 4 of block b inside token t's codes.
                x[t] = vld1q_s8(a.q.as_ptr().add(b * block + i0 * 4));
            }
            for j in 0..4 {
                for q in 0..4 {
                    // SAFETY: code vector i0 + j of this record lies inside the group's data.
                    let v = vld1q_u8(r.add((i0 + j) * 64 + q * 16));
                    let c = vreinterpretq_s8_u8(veorq_u8(v, flip));
                    for t in 0..T {
                        d[t][q][j % C] = dot_lane::<D>(j, d[t][q][j % C], c, x[t]);
                    }
                }
            }
        }
        // SAFETY: the record ends with the 16 rows' f16 scales.
        let s = scales(r.add(dw * 64));
        for (t, a) in ts.iter().enumerate() {
            let sx = *a.scale.get_unchecked(b);
            for q in 0..4 {
                let mut dq = d[t][q][0];
                if C == 2 {
                    dq = vaddq_s32(dq, d[t][q][1]);
                }
                acc[t][q] = vfmaq_f32(acc[t][q], vcvtq_f32_s32(dq), vmulq_n_f32(s[q], sx));
            }
        }
    }
    for (t, a) in acc.iter().enumerate() {
        // SAFETY: 16 outputs of token t0 + t inside `out` (checked by the caller).
        let o = out.as_mut_ptr().add((t0 + t) * count + col);
        for (q, v) in a.iter().enumerate() {
            vst1q_f32(o.add(q * 4), *v);
        }
    }
}

/// Tokens four (or two) at a time through `smmla`, a last single one through dotprod.
///
/// # Safety
/// The CPU must have dotprod and i8mm; arguments as checked by `q8_packed::dot_rows_tokens`.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) unsafe fn dot_rows_tokens_i8mm(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    super::each_tile(first, count, acts.len(), &[4, 2, 1], |g, col, t0, w| {
        let ts = &acts[t0..t0 + w];
        // SAFETY: as this function's; the tile's tokens and the group's outputs exist.
        unsafe {
            match w {
                4 => (0..2).for_each(|h| mmla_half::<2>(p, g, h, ts, out, count, col, t0)),
                2 => (0..2).for_each(|h| mmla_half::<1>(p, g, h, ts, out, count, col, t0)),
                _ => group::<super::Sdot, 1, 2>(p, g, ts, out, count, col, t0),
            }
        }
    });
}

/// Rows `16g + 8·half ..+ 8` against `2P` tokens with `smmla`.
///
/// # Safety
/// As [`dot_rows_tokens_i8mm`]; `ts.len() == 2P`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn mmla_half<const P: usize>(
    p: &PackedQ8,
    g: usize,
    half: usize,
    ts: &[QuantActs],
    out: &mut [f32],
    count: usize,
    col: usize,
    t0: usize,
) {
    let (nb, rec, block) = (p.blocks(), p.record(), p.block);
    let dw = block / 4;
    let flip = vdupq_n_u8(0x80);
    let base = p.data.as_ptr().add(g * nb * rec);
    let mut acc = [[vdupq_n_f32(0.0); P]; 4];
    for b in 0..nb {
        let r = base.add(b * rec);
        let mut d = [[vdupq_n_s32(0); P]; 4];
        for i in (0..dw).step_by(2) {
            let mut w = [vdupq_n_s8(0); 4];
            for ql in 0..2 {
                let q = 2 * half + ql;
                // SAFETY: code vectors i and i + 1 (dw is even) of this record.
                let va = vreinterpretq_u32_u8(veorq_u8(vld1q_u8(r.add(i * 64 + q * 16)), flip));
                let vb =
                    vreinterpretq_u32_u8(veorq_u8(vld1q_u8(r.add((i + 1) * 64 + q * 16)), flip));
                w[2 * ql] = vreinterpretq_s8_u32(vzip1q_u32(va, vb));
                w[2 * ql + 1] = vreinterpretq_s8_u32(vzip2q_u32(va, vb));
            }
            for u in 0..P {
                let at = b * block + i * 4;
                // SAFETY: activations 4i..4i + 8 of block b of tokens 2u and 2u + 1.
                let x = vcombine_s8(
                    vld1_s8(ts[2 * u].q.as_ptr().add(at)),
                    vld1_s8(ts[2 * u + 1].q.as_ptr().add(at)),
                );
                for rp in 0..4 {
                    d[rp][u] = smmla(d[rp][u], w[rp], x);
                }
            }
        }
        // SAFETY: the record ends with the 16 rows' f16 scales.
        let s = scales(r.add(dw * 64));
        for u in 0..P {
            let (a0, a1) = (&ts[2 * u], &ts[2 * u + 1]);
            let h = vset_lane_f32::<1>(
                *a1.scale.get_unchecked(b),
                vdup_n_f32(*a0.scale.get_unchecked(b)),
            );
            let sx = vcombine_f32(h, h);
            for rp in 0..4 {
                let q = 2 * half + rp / 2;
                let s2 = if rp % 2 == 0 {
                    vzip1q_f32(s[q], s[q])
                } else {
                    vzip2q_f32(s[q], s[q])
                };
                acc[rp][u] = vfmaq_f32(acc[rp][u], vcvtq_f32_s32(d[rp][u]), vmulq_f32(s2, sx));
            }
        }
    }
    for u in 0..P {
        for ql in 0..2 {
            let (e, o) = (acc[2 * ql][u], acc[2 * ql + 1][u]);
            let row = col + 8 * half + 4 * ql;
            // SAFETY: 4 outputs of tokens t0 + 2u and t0 + 2u + 1 inside `out`.
            vst1q_f32(
                out.as_mut_ptr().add((t0 + 2 * u) * count + row),
                vuzp1q_f32(e, o),
            );
            vst1q_f32(
                out.as_mut_ptr().add((t0 + 2 * u + 1) * count + row),
                vuzp2q_f32(e, o),
            );
        }
    }
}
