//! Dense f32/f16/bf16 weights times f32 activations with NEON: 8 values per step, widened in
//! registers (bf16 by a 16-bit shift, f16 by `fcvtl`), register tiles of up to 4 rows × 4
//! tokens so each widened weight vector feeds 4 FMAs; the column tail (cols % 8) in scalar
//! f32 on the widened values.

use super::{f16_hi, f16_lo};
use crate::dense::{DenseKind, DenseMatrix};
use std::arch::aarch64::*;

/// # Safety
/// Sizes as checked by `kernels::dense::rows_tokens`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn rows_tokens(
    m: &DenseMatrix,
    first: usize,
    count: usize,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    match m.kind {
        DenseKind::F32 => run::<4>(m, first, count, x, n, out),
        DenseKind::F16 => run::<1>(m, first, count, x, n, out),
        DenseKind::BF16 => run::<2>(m, first, count, x, n, out),
    }
}

/// `KIND`: 4 f32, 1 f16, 2 bf16 (a const so each storage type gets its own loop).
#[inline(always)]
unsafe fn run<const KIND: u8>(
    m: &DenseMatrix,
    first: usize,
    count: usize,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    let esize = if KIND == 4 { 4 } else { 2 };
    let row_bytes = m.cols * esize;
    let base = m.bytes.as_ptr().add(first * row_bytes);
    let mut i = 0;
    while i < count {
        let r = (count - i).min(4);
        let mut t = 0;
        while t < n {
            let tn = (n - t).min(4);
            let w = base.add(i * row_bytes);
            let xp = x.as_ptr().add(t * m.cols);
            let o = out.as_mut_ptr().add(t * count + i);
            // SAFETY (all arms): rows i..i+r and tokens t..t+tn are inside the checked sizes.
            match (r, tn) {
                (4, 4) => tile::<KIND, 4, 4>(w, row_bytes, xp, m.cols, o, count),
                (4, 3) => tile::<KIND, 4, 3>(w, row_bytes, xp, m.cols, o, count),
                (4, 2) => tile::<KIND, 4, 2>(w, row_bytes, xp, m.cols, o, count),
                (4, _) => tile::<KIND, 4, 1>(w, row_bytes, xp, m.cols, o, count),
                (_, 4) => tile::<KIND, 1, 4>(w, row_bytes, xp, m.cols, o, count),
                (_, 3) => tile::<KIND, 1, 3>(w, row_bytes, xp, m.cols, o, count),
                (_, 2) => tile::<KIND, 1, 2>(w, row_bytes, xp, m.cols, o, count),
                _ => tile::<KIND, 1, 1>(w, row_bytes, xp, m.cols, o, count),
            }
            t += tn;
        }
        i += if r == 4 { 4 } else { 1 };
    }
}

/// 8 weights from element `k` of the row at `p`, as f32.
#[inline(always)]
unsafe fn load_w<const KIND: u8>(p: *const u8, k: usize) -> (float32x4_t, float32x4_t) {
    // SAFETY: the caller keeps k + 8 inside the row.
    match KIND {
        4 => {
            let f = p.cast::<f32>().add(k);
            (vld1q_f32(f), vld1q_f32(f.add(4)))
        }
        1 => {
            let h = vld1q_u16(p.cast::<u16>().add(k));
            (f16_lo(h), f16_hi(h))
        }
        _ => {
            let h = vld1q_u16(p.cast::<u16>().add(k));
            (
                vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
            )
        }
    }
}

/// One weight as f32.
#[inline(always)]
unsafe fn load_one<const KIND: u8>(p: *const u8, k: usize) -> f32 {
    // SAFETY: the caller keeps k inside the row.
    match KIND {
        4 => *p.cast::<f32>().add(k),
        1 => half::f16::from_bits(*p.cast::<u16>().add(k)).to_f32(),
        _ => f32::from_bits((*p.cast::<u16>().add(k) as u32) << 16),
    }
}

/// R rows × T tokens: `o[t·stride + r] = Σ_k w_r[k]·x_t[k]`.
#[inline(always)]
unsafe fn tile<const KIND: u8, const R: usize, const T: usize>(
    w: *const u8,
    row_bytes: usize,
    x: *const f32,
    cols: usize,
    o: *mut f32,
    stride: usize,
) {
    let mut acc = [[[vdupq_n_f32(0.0); 2]; T]; R];
    let whole = cols / 8 * 8;
    let mut k = 0;
    while k < whole {
        let mut xv = [[vdupq_n_f32(0.0); 2]; T];
        for (t, v) in xv.iter_mut().enumerate() {
            // SAFETY: token t's row holds `cols` values; k + 8 ≤ cols.
            let p = x.add(t * cols + k);
            *v = [vld1q_f32(p), vld1q_f32(p.add(4))];
        }
        for (r, a) in acc.iter_mut().enumerate() {
            let (w0, w1) = load_w::<KIND>(w.add(r * row_bytes), k);
            for t in 0..T {
                a[t][0] = vfmaq_f32(a[t][0], w0, xv[t][0]);
                a[t][1] = vfmaq_f32(a[t][1], w1, xv[t][1]);
            }
        }
        k += 8;
    }
    for (r, a) in acc.iter().enumerate() {
        for (t, v) in a.iter().enumerate() {
            let mut s = vaddvq_f32(vaddq_f32(v[0], v[1]));
            for k in whole..cols {
                s += load_one::<KIND>(w.add(r * row_bytes), k) * *x.add(t * cols + k);
            }
            // SAFETY: o + t·stride + r is inside the caller's output block.
            *o.add(t * stride + r) = s;
        }
    }
}
