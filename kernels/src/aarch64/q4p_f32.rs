//! The 16-row interleaved Q4 layout against f32 activations (W4A16, the exact path) with NEON:
//! as the AVX2 version (`x86/avx2/q4p_f32.rs`), a code nibble becomes f32 by a shift, a mask
//! and a convert, then one FMA per column and token; here a row quad (16 bytes) at a time,
//! and the block's scale and zero point once per block. High-bit planes (GGUF Q5/Q6) add their
//! bits before the convert.

use super::q4p::block_params;
use crate::q4_packed::{PackedQ4, GROUP};
use std::arch::aarch64::*;

/// # Safety
/// The arguments were checked by `w4a16::dot_rows_f32` (row range in whole groups, `x`, `sums`
/// and `out` sized for the same number of tokens).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_rows(
    p: &PackedQ4,
    first: usize,
    count: usize,
    x: &[f32],
    sums: &[f32],
    out: &mut [f32],
) {
    let n = out.len() / count;
    for g in first / GROUP..(first + count) / GROUP {
        let col = g * GROUP - first;
        let mut t0 = 0;
        while t0 < n {
            if n - t0 >= 2 {
                group::<2>(p, g, t0, x, sums, out, count, col);
                t0 += 2;
            } else {
                group::<1>(p, g, t0, x, sums, out, count, col);
                t0 += 1;
            }
        }
    }
}

/// Where column `j` of a 4-byte lane sits: byte `j/2`, high nibble first.
const SHIFTS: [i32; 8] = [4, 0, 12, 8, 20, 16, 28, 24];

/// Group `g`'s 16 rows against tokens `t0..t0 + T`.
///
/// # Safety
/// As [`dot_rows`]; the tokens exist.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn group<const T: usize>(
    p: &PackedQ4,
    g: usize,
    t0: usize,
    x: &[f32],
    sums: &[f32],
    out: &mut [f32],
    count: usize,
    col: usize,
) {
    let (nb, rec, block, cols) = (p.blocks(), p.record(), p.block, p.cols);
    let vw = block / 8;
    let nibble = vdupq_n_u32(0xF);
    let table = super::q4p::signed_table(p);
    let base = p.data.as_ptr().add(g * nb * rec);
    let mut acc = [[vdupq_n_f32(0.0); 4]; T];
    for b in 0..nb {
        let r = base.add(b * rec);
        // Two chains per token and quad: even and odd columns.
        let mut d = [[[vdupq_n_f32(0.0); 2]; 4]; T];
        for i in 0..vw {
            for q in 0..4 {
                // SAFETY: quad q of code vector i of this record lies inside the group.
                let v = vld1q_u32(r.add(i * 64 + q * 16).cast());
                for (j, &shift) in SHIFTS.iter().enumerate() {
                    let mut c = vandq_u32(vshlq_u32(v, vdupq_n_s32(-shift)), nibble);
                    let (byte, h) = ((shift / 8) as usize, usize::from(shift % 8 == 0));
                    for pl in 0..p.form.hi_bits as usize {
                        let bit = pl * 2 * vw + 2 * i + h;
                        // SAFETY: quad q of plane vector bit / 8, inside the record.
                        let plane = vld1q_u32(r.add((vw + bit / 8) * 64 + q * 16).cast());
                        let at = vdupq_n_s32(-((8 * byte + bit % 8) as i32));
                        let one = vandq_u32(vshlq_u32(plane, at), vdupq_n_u32(1));
                        c = vorrq_u32(c, vshlq_u32(one, vdupq_n_s32(4 + pl as i32)));
                    }
                    let cf = match table {
                        // A non-uniform form: `tbl` on each lane's low byte (the other bytes'
                        // indices are out of range, so 0), then the i8 sign-extended.
                        Some(t) => {
                            let idx = vorrq_u32(c, vdupq_n_u32(0xFFFF_FF00));
                            let v = vqtbl1q_u8(t, vreinterpretq_u8_u32(idx));
                            let v = vshlq_n_s32::<24>(vreinterpretq_s32_u8(v));
                            vcvtq_f32_s32(vshrq_n_s32::<24>(v))
                        }
                        None => vcvtq_f32_u32(c),
                    };
                    for (t, dt) in d.iter_mut().enumerate() {
                        // SAFETY: value 8i + j of block b of token t0 + t inside x.
                        let xv = *x.get_unchecked((t0 + t) * cols + b * block + i * 8 + j);
                        dt[q][j % 2] = vfmaq_n_f32(dt[q][j % 2], cf, xv);
                    }
                }
            }
        }
        // SAFETY: the record ends with the 16 rows' parameters.
        let (s, m) = block_params(r.add(p.params_at()), p);
        for (t, dt) in d.iter().enumerate() {
            let xs = *sums.get_unchecked((t0 + t) * nb + b);
            for q in 0..4 {
                let dot = vaddq_f32(dt[q][0], dt[q][1]);
                acc[t][q] = vfmaq_f32(acc[t][q], dot, s[q]);
                acc[t][q] = vfmaq_n_f32(acc[t][q], m[q], xs);
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
