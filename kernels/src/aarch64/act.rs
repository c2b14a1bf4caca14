//! `kernels::act` with NEON: activations quantized to int8 per block, bit-identical to the
//! scalar twin (the same max, scale and `fcvtas`, which rounds half away from zero as
//! `f32::round`), 16 values at a time; and the packed Q4 kernels' reordering of each 8 values
//! (one `tbl`).

use std::arch::aarch64::*;

/// # Safety
/// `block % 16 == 0`, `q.len() == x.len()`, and `scale` and `scaled_sum` hold
/// `x.len() / block` entries.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn quantize(
    x: &[f32],
    block: usize,
    q: &mut [i8],
    scale: &mut [f32],
    scaled_sum: &mut [f32],
) {
    let (lo, hi) = (vdupq_n_s32(-127), vdupq_n_s32(127));
    for b in 0..x.len() / block {
        let xs = x.as_ptr().add(b * block);
        let mut m = vdupq_n_f32(0.0);
        for i in (0..block).step_by(4) {
            // SAFETY: i + 4 <= block inside this block of x.
            m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xs.add(i))));
        }
        let amax = vmaxvq_f32(m);
        let s = amax / 127.0;
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        let mut sum = vdupq_n_s32(0);
        for i in (0..block).step_by(16) {
            let mut ints = [vdupq_n_s32(0); 4];
            for (k, r) in ints.iter_mut().enumerate() {
                // SAFETY: i + 16 <= block, so values i + 4k .. i + 4k + 4 are in this block.
                let v = vmulq_n_f32(vld1q_f32(xs.add(i + 4 * k)), inv);
                *r = vmaxq_s32(vminq_s32(vcvtaq_s32_f32(v), hi), lo);
                sum = vaddq_s32(sum, *r);
            }
            let w0 = vcombine_s16(vmovn_s32(ints[0]), vmovn_s32(ints[1]));
            let w1 = vcombine_s16(vmovn_s32(ints[2]), vmovn_s32(ints[3]));
            // SAFETY: 16 bytes of this block of q.
            vst1q_s8(
                q.as_mut_ptr().add(b * block + i),
                vcombine_s8(vmovn_s16(w0), vmovn_s16(w1)),
            );
        }
        scale[b] = s;
        scaled_sum[b] = s * vaddvq_s32(sum) as f32;
    }
}

/// Each run of 8 values reordered as its 4 even-position values, then its 4 odd ones.
///
/// # Safety
/// `perm.len() == q.len()`, a multiple of 8.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn perm8(q: &[i8], perm: &mut [i8]) {
    const IDX: [u8; 16] = [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15];
    let idx = vld1q_u8(IDX.as_ptr());
    let whole = q.len() / 16 * 16;
    for i in (0..whole).step_by(16) {
        // SAFETY: i + 16 <= both lengths.
        let v = vld1q_s8(q.as_ptr().add(i));
        vst1q_s8(perm.as_mut_ptr().add(i), vqtbl1q_s8(v, idx));
    }
    for (src, dst) in q[whole..]
        .chunks_exact(8)
        .zip(perm[whole..].chunks_exact_mut(8))
    {
        for j in 0..4 {
            dst[j] = src[2 * j];
            dst[4 + j] = src[2 * j + 1];
        }
    }
}
