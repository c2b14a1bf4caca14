//! The 16-row interleaved Q4 layout (see `kernels::q4_packed`) with NEON or dotprod. A 64-byte
//! code vector is four 16-byte registers of four rows each; each 4-byte lane holds one row's 8
//! codes (high nibbles: its even weights, low: its odd ones), so after the nibble split one
//! `sdot` by element (`vm.4b[0]`: the chunk's 4 even activations, `[1]`: the 4 odd) adds 4
//! rows × 4 products with no shuffle: the layout chosen for AVX-512's broadcast dword fits
//! the indexed `sdot` as it is. A block ends in one multiply-add per row quad for the scales
//! and one for the zero points, as on x86. Non-uniform forms (IQ4_NL, IQ4_XS) look their
//! codes up with one `tbl` per 16 and go on as signed bytes.
//!
//! Up to two tokens per pass over a group (16 rows × 2 tokens of integer accumulators, 8 of
//! float, 8 nibble registers: 32 is the register file); a group's records are ~8 KiB for
//! width 896, so the next pair reads them from L1.

use super::{f16_hi, f16_lo, Dot};
use crate::act::QuantActs;
use crate::q4_packed::PackedQ4;
use std::arch::aarch64::*;

/// # Safety
/// The CPU must have what `D` needs, and this must be called from a function compiled with
/// it; the arguments were checked by `q4_packed::dot_rows_tokens` (row range in whole groups,
/// activations in the matrix's block with chunk 8, output length).
#[inline(always)]
pub(crate) unsafe fn dot_rows_tokens<D: Dot>(
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    super::each_tile(first, count, acts.len(), &[2, 1], |g, col, t0, w| {
        let ts = &acts[t0..t0 + w];
        // The plane-free forms (all `.pocket` Q4, GGUF Q4_0/Q4_1/Q4_K) get a loop body with
        // no plane code in it, which the compiler unrolls and keeps in registers.
        // SAFETY: as this function's; the tile's tokens and the group's outputs exist.
        unsafe {
            match (w == 2, p.form.hi_bits > 0) {
                (true, false) => group::<D, 2, 1, false>(p, g, ts, out, count, col, t0),
                (true, true) => group::<D, 2, 1, true>(p, g, ts, out, count, col, t0),
                (false, false) => group::<D, 1, 2, false>(p, g, ts, out, count, col, t0),
                (false, true) => group::<D, 1, 2, true>(p, g, ts, out, count, col, t0),
            }
        }
    });
}

/// The dotprod level (`sdot`).
///
/// # Safety
/// As [`dot_rows_tokens`], on a CPU with dotprod.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn dot_rows_tokens_dotprod(
    p: &PackedQ4,
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
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    dot_rows_tokens::<super::Neon>(p, first, count, acts, out)
}

/// One group of 16 rows against `T` tokens, `C` integer accumulator chains per row quad and
/// token (the high and the low nibbles' products go to different chains when `C == 2`);
/// `PLANES`: the form has high-bit planes.
///
/// # Safety
/// As [`dot_rows_tokens`]; `T == ts.len()`, outputs `col..col + 16` of each token in range.
#[inline(always)]
pub(super) unsafe fn group<D: Dot, const T: usize, const C: usize, const PLANES: bool>(
    p: &PackedQ4,
    g: usize,
    ts: &[QuantActs],
    out: &mut [f32],
    count: usize,
    col: usize,
    t0: usize,
) {
    let (nb, rec, block) = (p.blocks(), p.record(), p.block);
    let dw = block / 8;
    let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
    let mask = vdupq_n_u8(0x0F);
    let table = signed_table(p);
    let base = p.data.as_ptr().add(g * nb * rec);
    let mut acc = [[vdupq_n_f32(0.0); 4]; T];
    for b in 0..nb {
        let r = base.add(b * rec);
        let mut d = [[[vdupq_n_s32(0); C]; 4]; T];
        for i in 0..dw {
            let mut hi = [vdupq_n_s8(0); 4];
            let mut lo = [vdupq_n_s8(0); 4];
            for q in 0..4 {
                // SAFETY: vector i of this record lies inside the group's data.
                let v = vld1q_u8(r.add(i * 64 + q * 16));
                let (mut h, mut l) = (vshrq_n_u8::<4>(v), vandq_u8(v, mask));
                if PLANES {
                    add_high_bits(p, r, i, q, &mut h, &mut l);
                }
                if let Some(t) = table {
                    (h, l) = (vqtbl1q_u8(t, h), vqtbl1q_u8(t, l));
                }
                hi[q] = vreinterpretq_s8_u8(h);
                lo[q] = vreinterpretq_s8_u8(l);
            }
            for (t, a) in ts.iter().enumerate() {
                // SAFETY: this block's activations, 8 per code dword, inside token t's.
                let x8 = vld1_s8(a.perm.as_ptr().add(b * block + i * 8));
                let x = vcombine_s8(x8, x8);
                for q in 0..4 {
                    d[t][q][0] = D::dot::<0>(d[t][q][0], hi[q], x);
                    d[t][q][C - 1] = D::dot::<1>(d[t][q][C - 1], lo[q], x);
                }
            }
        }
        // SAFETY: the record ends with the 16 rows' parameters.
        let (s, m) = block_params(r.add(p.params_at()), p);
        for (t, a) in ts.iter().enumerate() {
            let sx = *a.scale.get_unchecked(b);
            let xs = *a.scaled_sum.get_unchecked(b);
            for q in 0..4 {
                let mut dq = d[t][q][0];
                if C == 2 {
                    dq = vaddq_s32(dq, d[t][q][1]);
                }
                let f = vcvtq_f32_s32(dq);
                acc[t][q] = vfmaq_f32(acc[t][q], f, vmulq_n_f32(s[q], sx));
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

/// A non-uniform form's table as one register of signed bytes, for `tbl`: one lookup turns
/// 16 codes into their values, which `sdot`/`smmla` take as they are (offset 0).
///
/// # Safety
/// NEON.
#[inline(always)]
pub(super) unsafe fn signed_table(p: &PackedQ4) -> Option<uint8x16_t> {
    // SAFETY: the table holds 16 bytes.
    p.form.table.map(|t| unsafe { vld1q_u8(t.as_ptr().cast()) })
}

/// The 16 rows' scales `s` and offsets `m = z − offset·s` (`−offset·s` when symmetric) of a
/// block, four rows per register: a decoded weight is `s·code + m`.
///
/// # Safety
/// `pr` points at a record's parameters (16 scales, or 16 zero points then 16 scales; f16,
/// or f32 when the form is wide).
#[inline(always)]
pub(super) unsafe fn block_params(
    pr: *const u8,
    p: &PackedQ4,
) -> ([float32x4_t; 4], [float32x4_t; 4]) {
    let off = p.form.offset as f32;
    let load = |at: usize| -> [float32x4_t; 4] {
        if p.form.wide {
            // SAFETY: 16 f32 parameters from `at` (in f16 units: at·2 bytes).
            let f = pr.add(at * 2).cast::<f32>();
            [0, 4, 8, 12].map(|k| vld1q_f32(f.add(k)))
        } else {
            // SAFETY: 16 f16 parameters from `at`.
            let (a, b) = (
                vld1q_u16(pr.add(at).cast()),
                vld1q_u16(pr.add(at + 16).cast()),
            );
            [f16_lo(a), f16_hi(a), f16_lo(b), f16_hi(b)]
        }
    };
    if p.sym {
        let s = load(0);
        (s, s.map(|v| vmulq_n_f32(v, -off)))
    } else {
        let (z, s) = (load(0), load(32));
        let mut m = z;
        for q in 0..4 {
            m[q] = vfmsq_n_f32(z[q], s[q], off);
        }
        (s, m)
    }
}

/// Adds the high-bit planes to quad `q` of code vector `i`'s two nibble halves (`hi`: the
/// high nibbles, `lo`: the low), as `q4_packed::Form` lays them out.
///
/// # Safety
/// `r` is a record of `p`.
#[inline(always)]
pub(super) unsafe fn add_high_bits(
    p: &PackedQ4,
    r: *const u8,
    i: usize,
    q: usize,
    hi: &mut uint8x16_t,
    lo: &mut uint8x16_t,
) {
    let vw = p.block / 8;
    for pl in 0..p.form.hi_bits as usize {
        let add = vdupq_n_u8(16 << pl);
        for (h, v) in [&mut *hi, &mut *lo].into_iter().enumerate() {
            let bit = pl * 2 * vw + 2 * i + h;
            // SAFETY: plane vector bit / 8 lies inside the record's high-bit planes.
            let plane = vld1q_u8(r.add((vw + bit / 8) * 64 + q * 16));
            let set = vtstq_u8(plane, vdupq_n_u8(1 << (bit % 8)));
            *v = vaddq_u8(*v, vandq_u8(set, add));
        }
    }
}
