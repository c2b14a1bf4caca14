//! Attention tiles with AVX-512: a tile's 16 scores per query head are one vector (keys are
//! stored tile-transposed), the running softmax uses a vector `exp`, and values are summed
//! 32 dimensions at a time for up to 8 query heads.

use crate::kernels::attn::{
    KvHead, Running, EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, RESCALE_AT, TILE,
};
use std::arch::x86_64::*;

/// Query heads per pass (16 value accumulators and 8 score vectors fit the 32 registers).
const HEADS: usize = 8;

/// # Safety
/// The CPU must support AVX-512 F, F16C and FMA; `d % 32 == 0`; `kv` holds every tile up
/// to `t1` (checked by `kernels::attn::span`).
#[target_feature(enable = "avx512f,f16c,fma")]
pub(crate) unsafe fn span(
    q: &[f32],
    d: usize,
    kv: KvHead,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    match kv {
        KvHead::F32 { k, v } => {
            span_impl::<false>(q, d, k.as_ptr().cast(), v.as_ptr().cast(), t0, t1, run)
        }
        KvHead::F16 { k, v } => {
            span_impl::<true>(q, d, k.as_ptr().cast(), v.as_ptr().cast(), t0, t1, run)
        }
    }
}

/// 16 cache elements from element index `at`, as f32.
#[inline]
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn load<const HALF: bool>(p: *const u8, at: usize) -> __m512 {
    if HALF {
        // SAFETY: the caller keeps `at + 16` inside the buffer (f16 elements).
        _mm512_cvtph_ps(_mm256_loadu_si256(p.add(at * 2).cast()))
    } else {
        // SAFETY: as above, f32 elements.
        _mm512_loadu_ps(p.cast::<f32>().add(at))
    }
}

/// The vector twin of `kernels::attn::exp`.
#[inline]
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn exp(x: __m512) -> __m512 {
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_LO));
    let x = _mm512_min_ps(x, _mm512_set1_ps(EXP_HI));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let e = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    _mm512_maskz_mov_ps(!under, _mm512_scalef_ps(e, n))
}

#[inline]
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn span_impl<const HALF: bool>(
    q: &[f32],
    d: usize,
    k: *const u8,
    v: *const u8,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    let g = run.m.len();
    // Each head's sum of exponentials, kept per lane for the span (no horizontal add per tile);
    // the incoming sum rides in lane 0.
    let mut lv: Vec<__m512> = run
        .l
        .iter()
        .map(|&l| _mm512_mask_mov_ps(_mm512_setzero_ps(), 1, _mm512_set1_ps(l)))
        .collect();
    let mut tile = t0;
    while tile < t1 {
        let valid = TILE.min(t1 - tile);
        let mut h0 = 0;
        while h0 < g {
            let hn = HEADS.min(g - h0);
            let t = TileRun {
                q: q.as_ptr().add(h0 * d),
                d,
                k,
                v,
                tile,
                valid,
            };
            let (m, l) = (&mut run.m[h0..h0 + hn], &mut lv[h0..h0 + hn]);
            let acc = run.acc.as_mut_ptr().add(h0 * d);
            match hn {
                8 => t.heads::<HALF, 8>(m, l, acc),
                7 => t.heads::<HALF, 7>(m, l, acc),
                6 => t.heads::<HALF, 6>(m, l, acc),
                5 => t.heads::<HALF, 5>(m, l, acc),
                4 => t.heads::<HALF, 4>(m, l, acc),
                3 => t.heads::<HALF, 3>(m, l, acc),
                2 => t.heads::<HALF, 2>(m, l, acc),
                _ => t.heads::<HALF, 1>(m, l, acc),
            }
            h0 += hn;
        }
        tile += TILE;
    }
    for (l, v) in run.l.iter_mut().zip(&lv) {
        *l = _mm512_reduce_add_ps(*v);
    }
}

/// One tile of positions for a run of query heads.
struct TileRun {
    q: *const f32,
    d: usize,
    k: *const u8,
    v: *const u8,
    tile: usize,
    valid: usize,
}

impl TileRun {
    /// # Safety
    /// As [`span`]; `H` heads from `q`, `m`, `l` and `acc` (H × d).
    #[inline]
    #[target_feature(enable = "avx512f,f16c,fma")]
    unsafe fn heads<const HALF: bool, const H: usize>(
        &self,
        m: &mut [f32],
        l: &mut [__m512],
        acc: *mut f32,
    ) {
        let d = self.d;
        // Scores: keys of the tile are 16 lanes per dimension.
        let kt = self.tile / TILE * d * TILE;
        let mut s = [_mm512_setzero_ps(); H];
        for i in 0..d {
            let kv = load::<HALF>(self.k, kt + i * TILE);
            for (h, sh) in s.iter_mut().enumerate() {
                *sh = _mm512_fmadd_ps(_mm512_set1_ps(*self.q.add(h * d + i)), kv, *sh);
            }
        }
        let lanes = if self.valid == TILE {
            0xFFFF
        } else {
            ((1u32 << self.valid) - 1) as __mmask16
        };
        let mut p = [[0.0f32; TILE]; H];
        // The reference max moves only when a score passes it by more than RESCALE_AT (see
        // `kernels::attn::span_scalar`): most tiles skip the reduction and the rescale.
        let mut corr = [1.0f32; H];
        let mut rescale = false;
        for h in 0..H {
            let sm = _mm512_mask_blend_ps(lanes, _mm512_set1_ps(f32::NEG_INFINITY), s[h]);
            let limit = _mm512_set1_ps(m[h] + RESCALE_AT);
            if _mm512_cmp_ps_mask::<_CMP_GT_OQ>(sm, limit) != 0 {
                let mx = _mm512_reduce_max_ps(sm);
                corr[h] = crate::kernels::attn::exp(m[h] - mx);
                l[h] = _mm512_mul_ps(l[h], _mm512_set1_ps(corr[h]));
                m[h] = mx;
                rescale = true;
            }
            let e = exp(_mm512_sub_ps(sm, _mm512_set1_ps(m[h])));
            l[h] = _mm512_add_ps(l[h], e);
            _mm512_storeu_ps(p[h].as_mut_ptr(), e);
        }
        // Values: 32 dimensions at a time.
        let mut dc = 0;
        while dc < d {
            let mut a = [[_mm512_setzero_ps(); 2]; H];
            for h in 0..H {
                a[h][0] = _mm512_loadu_ps(acc.add(h * d + dc));
                a[h][1] = _mm512_loadu_ps(acc.add(h * d + dc + 16));
                if rescale {
                    let c = _mm512_set1_ps(corr[h]);
                    a[h][0] = _mm512_mul_ps(a[h][0], c);
                    a[h][1] = _mm512_mul_ps(a[h][1], c);
                }
            }
            for t in 0..self.valid {
                let row = (self.tile + t) * d + dc;
                let (v0, v1) = (load::<HALF>(self.v, row), load::<HALF>(self.v, row + 16));
                for h in 0..H {
                    let pb = _mm512_set1_ps(p[h][t]);
                    a[h][0] = _mm512_fmadd_ps(pb, v0, a[h][0]);
                    a[h][1] = _mm512_fmadd_ps(pb, v1, a[h][1]);
                }
            }
            for h in 0..H {
                _mm512_storeu_ps(acc.add(h * d + dc), a[h][0]);
                _mm512_storeu_ps(acc.add(h * d + dc + 16), a[h][1]);
            }
            dc += 32;
        }
    }
}
