//! Q4 prefill with the int8 matrix multiply (`smmla`: a 2×8 by 8×2 product into a 2×2 block
//! of i32, 32 multiply-adds per instruction against `sdot`'s 16).
//!
//! The `rows16` layout serves it without a new layout tag. `smmla` wants each operand as two
//! rows of 8 bytes. Zipping the 32-bit lanes of code vectors `i` and `i + 1` of a row quad
//! (`zip1`/`zip2`) puts two rows' dwords `i, i+1` side by side. The nibble split then gives
//! each row's 8 even weights (high nibbles) and its 8 odd weights (low nibbles), before the
//! split rather than after it, so the split count stays the same. The activations of two
//! tokens meet them through one `uzp1`/`uzp2` of their chunk-8 permuted bytes (the even 4 of
//! chunks `i` and `i+1`, then the odd 4), shared by all rows.
//!
//! Per 2 code vectors, half a group (8 rows) × 4 tokens: 4 zips, 8 shifts/ands, 4 uzps and
//! 16 `smmla` for 512 multiply-adds. The dotprod kernel needs 8 splits and 32 `sdot` for the
//! same work. docs/performance.md counts both from the disassembly. Forms with high-bit
//! planes (GGUF Q5/Q6) take the dotprod kernel; non-uniform ones (IQ4_NL, IQ4_XS) add one
//! `tbl` per split half.

use super::q4p::block_params;
use super::smmla;
use crate::act::QuantActs;
use crate::q4_packed::PackedQ4;
use std::arch::aarch64::*;

/// `out[t·count + i] = row(first + i) · x_t`: tokens four at a time through `smmla`, a pair
/// left over likewise, a last single token through dotprod.
///
/// # Safety
/// The CPU must have dotprod and i8mm; arguments as checked by `q4_packed::dot_rows_tokens`,
/// and `p.form.hi_bits == 0`.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    debug_assert_eq!(p.form.hi_bits, 0);
    super::each_tile(first, count, acts.len(), &[4, 2, 1], |g, col, t0, w| {
        let ts = &acts[t0..t0 + w];
        // SAFETY: as this function's; the tile's tokens and the group's outputs exist.
        unsafe {
            match w {
                4 => (0..2).for_each(|h| half_group::<2>(p, g, h, ts, out, count, col, t0)),
                2 => (0..2).for_each(|h| half_group::<1>(p, g, h, ts, out, count, col, t0)),
                _ => super::q4p::group::<super::Sdot, 1, 2, false>(p, g, ts, out, count, col, t0),
            }
        }
    });
}

/// Rows `16g + 8·half ..+ 8` against `2P` tokens.
///
/// # Safety
/// As [`dot_rows_tokens`]; `ts.len() == 2P`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn half_group<const P: usize>(
    p: &PackedQ4,
    g: usize,
    half: usize,
    ts: &[QuantActs],
    out: &mut [f32],
    count: usize,
    col: usize,
    t0: usize,
) {
    let (nb, rec, block) = (p.blocks(), p.record(), p.block);
    let dw = block / 8;
    let mask = vdupq_n_u8(0x0F);
    let table = super::q4p::signed_table(p);
    let base = p.data.as_ptr().add(g * nb * rec);
    // Row pair `rp` (rows 8·half + 2rp, +1) × token pair `u`: [r0·a, r0·b, r1·a, r1·b].
    let mut acc = [[vdupq_n_f32(0.0); P]; 4];
    for b in 0..nb {
        let r = base.add(b * rec);
        let mut d = [[vdupq_n_s32(0); P]; 4];
        for i in (0..dw).step_by(2) {
            let mut w = [[vdupq_n_s8(0); 2]; 4];
            for ql in 0..2 {
                let q = 2 * half + ql;
                // SAFETY: code vectors i and i + 1 (dw is even) of this record.
                let va = vreinterpretq_u32_u8(vld1q_u8(r.add(i * 64 + q * 16)));
                let vb = vreinterpretq_u32_u8(vld1q_u8(r.add((i + 1) * 64 + q * 16)));
                for (k, z) in [vzip1q_u32(va, vb), vzip2q_u32(va, vb)]
                    .into_iter()
                    .enumerate()
                {
                    let z = vreinterpretq_u8_u32(z);
                    let (mut h, mut l) = (vshrq_n_u8::<4>(z), vandq_u8(z, mask));
                    if let Some(t) = table {
                        (h, l) = (vqtbl1q_u8(t, h), vqtbl1q_u8(t, l));
                    }
                    w[2 * ql + k] = [vreinterpretq_s8_u8(h), vreinterpretq_s8_u8(l)];
                }
            }
            for u in 0..P {
                // SAFETY: chunks i and i + 1 of block b of tokens 2u and 2u + 1.
                let at = b * block + i * 8;
                let xa = vreinterpretq_s32_s8(vld1q_s8(ts[2 * u].perm.as_ptr().add(at)));
                let xb = vreinterpretq_s32_s8(vld1q_s8(ts[2 * u + 1].perm.as_ptr().add(at)));
                let xe = vreinterpretq_s8_s32(vuzp1q_s32(xa, xb));
                let xo = vreinterpretq_s8_s32(vuzp2q_s32(xa, xb));
                for rp in 0..4 {
                    d[rp][u] = smmla(d[rp][u], w[rp][0], xe);
                    d[rp][u] = smmla(d[rp][u], w[rp][1], xo);
                }
            }
        }
        // SAFETY: the record ends with the 16 rows' parameters.
        let (s, m) = block_params(r.add(p.params_at()), p);
        for u in 0..P {
            let (a0, a1) = (&ts[2 * u], &ts[2 * u + 1]);
            let pair = |x: f32, y: f32| {
                let h = vset_lane_f32::<1>(y, vdup_n_f32(x));
                vcombine_f32(h, h)
            };
            let sx = pair(*a0.scale.get_unchecked(b), *a1.scale.get_unchecked(b));
            let xs = pair(
                *a0.scaled_sum.get_unchecked(b),
                *a1.scaled_sum.get_unchecked(b),
            );
            for rp in 0..4 {
                let q = 2 * half + rp / 2;
                let (s2, m2) = if rp % 2 == 0 {
                    (vzip1q_f32(s[q], s[q]), vzip1q_f32(m[q], m[q]))
                } else {
                    (vzip2q_f32(s[q], s[q]), vzip2q_f32(m[q], m[q]))
                };
                let f = vcvtq_f32_s32(d[rp][u]);
                acc[rp][u] = vfmaq_f32(acc[rp][u], f, vmulq_f32(s2, sx));
                acc[rp][u] = vfmaq_f32(acc[rp][u], m2, xs);
            }
        }
    }
    for u in 0..P {
        for ql in 0..2 {
            let (e, o) = (acc[2 * ql][u], acc[2 * ql + 1][u]);
            let row = col + 8 * half + 4 * ql;
            // SAFETY: 4 outputs of tokens t0 + 2u and t0 + 2u + 1 inside `out` (checked by
            // the caller).
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
