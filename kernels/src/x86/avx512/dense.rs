//! Dense f32/f16/bf16 weights times f32 activations with AVX-512: 16 values per step, widened
//! in registers (bf16 by a 16-bit shift, f16 by `vcvtph2ps`), register tiles of up to 4 rows ×
//! 4 tokens so each widened weight vector feeds 4 FMAs. Column tails use masked loads.

use crate::dense::{DenseKind, DenseMatrix};
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F/BW/VL and F16C; sizes as checked by
/// `kernels::dense::rows_tokens`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
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
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
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

/// 16 weights from element `k` of the row at `p`, as f32; lanes outside `mask` are 0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn load_w<const KIND: u8>(p: *const u8, k: usize, mask: __mmask16) -> __m512 {
    // SAFETY: the caller's mask covers only elements inside the row.
    match KIND {
        4 => _mm512_maskz_loadu_ps(mask, p.cast::<f32>().add(k)),
        1 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p.cast::<i16>().add(k))),
        _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
            _mm256_maskz_loadu_epi16(mask, p.cast::<i16>().add(k)),
        ))),
    }
}

/// R rows × T tokens: `o[t·stride + r] = Σ_k w_r[k]·x_t[k]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn tile<const KIND: u8, const R: usize, const T: usize>(
    w: *const u8,
    row_bytes: usize,
    x: *const f32,
    cols: usize,
    o: *mut f32,
    stride: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let mut k = 0;
    while k < cols {
        let left = cols - k;
        let mask: __mmask16 = if left >= 16 {
            0xFFFF
        } else {
            (1u16 << left) - 1
        };
        let mut xv = [_mm512_setzero_ps(); T];
        for (t, v) in xv.iter_mut().enumerate() {
            // SAFETY: token t's row holds `cols` values; the mask stops at the end.
            *v = _mm512_maskz_loadu_ps(mask, x.add(t * cols + k));
        }
        for (r, a) in acc.iter_mut().enumerate() {
            let wv = load_w::<KIND>(w.add(r * row_bytes), k, mask);
            for t in 0..T {
                a[t] = _mm512_fmadd_ps(wv, xv[t], a[t]);
            }
        }
        k += 16;
    }
    for (r, a) in acc.iter().enumerate() {
        for (t, v) in a.iter().enumerate() {
            // SAFETY: o + t·stride + r is inside the caller's output block.
            *o.add(t * stride + r) = _mm512_reduce_add_ps(*v);
        }
    }
}
