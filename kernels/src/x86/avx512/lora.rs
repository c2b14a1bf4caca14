//! The LoRA product's dot and scaled add (see `kernels::lora`), 16 lanes, masked tail.

use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F; `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let x = _mm512_maskz_loadu_ps(m, a.as_ptr().add(i));
        let y = _mm512_maskz_loadu_ps(m, b.as_ptr().add(i));
        acc = _mm512_fmadd_ps(x, y, acc);
        i += 16;
    }
    _mm512_reduce_add_ps(acc)
}

/// # Safety
/// The CPU must support AVX-512 F; `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len();
    let s = _mm512_set1_ps(alpha);
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let xv = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
        let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, _mm512_fmadd_ps(s, xv, yv));
        i += 16;
    }
}

/// [`dot`] with `a` as f16 bits (an adapter factor kept in f16), widened in registers.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and F16C; `a.len() == b.len()` (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(crate) unsafe fn dot_f16(a: &[u16], b: &[f32]) -> f32 {
    let n = a.len();
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a.as_ptr().add(i).cast()));
        let y = _mm512_maskz_loadu_ps(m, b.as_ptr().add(i));
        acc = _mm512_fmadd_ps(x, y, acc);
        i += 16;
    }
    _mm512_reduce_add_ps(acc)
}

/// [`axpy`] with `x` as f16 bits.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and F16C; `y.len() == x.len()` (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(crate) unsafe fn axpy_f16(y: &mut [f32], alpha: f32, x: &[u16]) {
    let n = y.len();
    let s = _mm512_set1_ps(alpha);
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside both slices.
        let xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x.as_ptr().add(i).cast()));
        let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, _mm512_fmadd_ps(s, xv, yv));
        i += 16;
    }
}

/// 16 elements from `i` of a row of f32 (`HALF` false) or f16 bits, under mask `m`, as f32.
#[inline(always)]
unsafe fn load<const HALF: bool>(p: *const u8, i: usize, m: __mmask16) -> __m512 {
    // SAFETY: the caller keeps the masked lanes inside the row.
    if HALF {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.cast::<u16>().add(i).cast()))
    } else {
        _mm512_maskz_loadu_ps(m, p.cast::<f32>().add(i))
    }
}

/// Four [`dot`]s (or [`dot_f16`]s) of rows `a` with one `x`, each accumulated exactly as the
/// single one is (bit for bit), reading `x` once for all four.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and F16C; each `a[k]` points to `x.len()` elements
/// (f16 bits if `HALF`, else f32).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(crate) unsafe fn dot4<const HALF: bool>(a: [*const u8; 4], x: &[f32]) -> [f32; 4] {
    let n = x.len();
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside x and every row.
        let xv = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
        for k in 0..4 {
            acc[k] = _mm512_fmadd_ps(load::<HALF>(a[k], i, m), xv, acc[k]);
        }
        i += 16;
    }
    acc.map(|v| _mm512_reduce_add_ps(v))
}

/// Four [`axpy`]s (or [`axpy_f16`]s) into one `y`, `y += alpha[0]·x[0]`, then `alpha[1]·x[1]`,
/// …: the same fused operations in the same order (bit for bit), `y` loaded and stored once.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and F16C; each `x[k]` points to `y.len()` elements
/// (f16 bits if `HALF`, else f32).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
pub(crate) unsafe fn axpy4<const HALF: bool>(y: &mut [f32], alpha: [f32; 4], x: [*const u8; 4]) {
    let n = y.len();
    let s = alpha.map(|a| _mm512_set1_ps(a));
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 under the mask lie inside y and every row.
        let mut yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
        for k in 0..4 {
            yv = _mm512_fmadd_ps(s[k], load::<HALF>(x[k], i, m), yv);
        }
        _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, yv);
        i += 16;
    }
}
