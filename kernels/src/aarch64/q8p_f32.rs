//! Packed Q8 rows against one token's f32 activations with NEON, bit for bit the reference
//! (`w8a16::dot_rows_f32_scalar`), as the AVX2 version (`x86/avx2/q8p_f32.rs`): a row's eight
//! consecutive codes (two 4-code lanes of neighbouring code vectors) are widened, converted,
//! multiplied by the block's scale, then by `x`, and added into lane `c mod 8` of two
//! four-lane registers (lanes 0–3 and 4–7), the order and the separate roundings of
//! `scalar::dot` over the decoded row (no fused multiply-add). Four rows run side by side, so
//! the adds of one row wait on their own chain only.

use crate::q8_packed::{PackedQ8, GROUP};
use std::arch::aarch64::*;

/// Rows decoded side by side.
const ROWS: usize = 4;

/// # Safety
/// The CPU must support NEON (every aarch64 target Rust builds for); the arguments were
/// checked by `w8a16::dot_rows_f32` (rows in whole groups, `x` of `cols`, `out` of `count`, a
/// block of whole 8-code runs).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_rows(
    p: &PackedQ8,
    first: usize,
    count: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let (nb, rec, block, dw) = (p.blocks(), p.record(), p.block, p.block / 4);
    let flip = vdup_n_s8(-128);
    for r0 in (first..first + count).step_by(ROWS) {
        // GROUP is a multiple of ROWS: the ROWS rows share a group.
        let (g, k0) = (r0 / GROUP, r0 % GROUP);
        let group = p.data.as_ptr().add(g * nb * rec);
        let mut lo_acc = [vdupq_n_f32(0.0); ROWS];
        let mut hi_acc = [vdupq_n_f32(0.0); ROWS];
        for b in 0..nb {
            let r = group.add(b * rec);
            // SAFETY: the record's f16 scales follow its dw code vectors; row k0 + j's is
            // entry k0 + j. `f16::to_f32` is exact, as the reference's decode.
            let s: [f32; ROWS] = std::array::from_fn(|j| {
                let h = (r.add(dw * 64 + (k0 + j) * 2) as *const u16).read_unaligned();
                half::f16::from_bits(h).to_f32()
            });
            for i in (0..dw).step_by(2) {
                // SAFETY: columns b·block + 4i .. + 8 of x (block is a multiple of 8).
                let xp = x.as_ptr().add(b * block + i * 4);
                let (x0, x1) = (vld1q_f32(xp), vld1q_f32(xp.add(4)));
                for j in 0..ROWS {
                    // SAFETY: lane k0 + j of code vectors i and i + 1 of this record.
                    let lo = (r.add(i * 64 + (k0 + j) * 4) as *const u32).read_unaligned();
                    let hi = (r.add(i * 64 + 64 + (k0 + j) * 4) as *const u32).read_unaligned();
                    let bytes = vcreate_s8(u64::from(lo) | (u64::from(hi) << 32));
                    let q = vmovl_s8(veor_s8(bytes, flip));
                    let w0 = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), s[j]);
                    let w1 = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(q))), s[j]);
                    lo_acc[j] = vaddq_f32(lo_acc[j], vmulq_f32(w0, x0));
                    hi_acc[j] = vaddq_f32(hi_acc[j], vmulq_f32(w1, x1));
                }
            }
        }
        for j in 0..ROWS {
            let mut lanes = [0.0f32; 8];
            vst1q_f32(lanes.as_mut_ptr(), lo_acc[j]);
            vst1q_f32(lanes.as_mut_ptr().add(4), hi_acc[j]);
            // The same sum as `scalar::dot`'s of its eight lanes.
            out[r0 - first + j] = lanes.iter().sum();
        }
    }
}
