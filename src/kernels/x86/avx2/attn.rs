//! Attention tiles with AVX2: as the AVX-512 version (see `attn_avx512`), with a tile's 16
//! scores in two vectors and values summed 16 dimensions at a time for up to 4 query heads.

use crate::kernels::attn::{
    KvHead, Running, EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, RESCALE_AT, TILE,
};
use std::arch::x86_64::*;

const HEADS: usize = 4;

/// # Safety
/// The CPU must support AVX2, F16C and FMA; `d % 16 == 0`; `kv` holds every tile up to `t1`
/// (checked by `kernels::attn::span`).
#[target_feature(enable = "avx2,f16c,fma")]
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

/// 8 cache elements from element index `at`, as f32.
#[inline]
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn load<const HALF: bool>(p: *const u8, at: usize) -> __m256 {
    if HALF {
        // SAFETY: the caller keeps `at + 8` inside the buffer (f16 elements).
        _mm256_cvtph_ps(_mm_loadu_si128(p.add(at * 2).cast()))
    } else {
        // SAFETY: as above, f32 elements.
        _mm256_loadu_ps(p.cast::<f32>().add(at))
    }
}

/// The vector twin of `kernels::attn::exp`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp(x: __m256) -> __m256 {
    let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(EXP_LO));
    let x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let e = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    // 2^n from the exponent bits (n is in −126..=127 after the clamps; lanes below are masked).
    let pow = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-126.0))),
        _mm256_set1_epi32(127),
    )));
    _mm256_and_ps(_mm256_mul_ps(e, pow), keep)
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    _mm_cvtss_f32(m)
}

#[inline]
#[target_feature(enable = "avx2,f16c,fma")]
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
    // As in the AVX-512 version: each head's sum of exponentials per lane for the span.
    let mut lv: Vec<__m256> = run
        .l
        .iter()
        .map(|&l| _mm256_setr_ps(l, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
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
        *l = super::q4::hsum(*v);
    }
}

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
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn heads<const HALF: bool, const H: usize>(
        &self,
        m: &mut [f32],
        l: &mut [__m256],
        acc: *mut f32,
    ) {
        let d = self.d;
        let kt = self.tile / TILE * d * TILE;
        let mut s = [[_mm256_setzero_ps(); 2]; H];
        for i in 0..d {
            let k0 = load::<HALF>(self.k, kt + i * TILE);
            let k1 = load::<HALF>(self.k, kt + i * TILE + 8);
            for (h, sh) in s.iter_mut().enumerate() {
                let qb = _mm256_set1_ps(*self.q.add(h * d + i));
                sh[0] = _mm256_fmadd_ps(qb, k0, sh[0]);
                sh[1] = _mm256_fmadd_ps(qb, k1, sh[1]);
            }
        }
        let mut p = [[0.0f32; TILE]; H];
        // Lazy rescaling, as `kernels::attn::span_scalar`.
        let mut corr = [1.0f32; H];
        let mut rescale = false;
        for h in 0..H {
            let mut sc = [0.0f32; TILE];
            _mm256_storeu_ps(sc.as_mut_ptr(), s[h][0]);
            _mm256_storeu_ps(sc.as_mut_ptr().add(8), s[h][1]);
            sc[self.valid..].fill(f32::NEG_INFINITY);
            let (s0, s1) = (
                _mm256_loadu_ps(sc.as_ptr()),
                _mm256_loadu_ps(sc.as_ptr().add(8)),
            );
            let limit = _mm256_set1_ps(m[h] + RESCALE_AT);
            let over = _mm256_or_ps(
                _mm256_cmp_ps::<_CMP_GT_OQ>(s0, limit),
                _mm256_cmp_ps::<_CMP_GT_OQ>(s1, limit),
            );
            if _mm256_movemask_ps(over) != 0 {
                let mx = hmax(_mm256_max_ps(s0, s1));
                corr[h] = crate::kernels::attn::exp(m[h] - mx);
                l[h] = _mm256_mul_ps(l[h], _mm256_set1_ps(corr[h]));
                m[h] = mx;
                rescale = true;
            }
            let mb = _mm256_set1_ps(m[h]);
            let (e0, e1) = (exp(_mm256_sub_ps(s0, mb)), exp(_mm256_sub_ps(s1, mb)));
            _mm256_storeu_ps(p[h].as_mut_ptr(), e0);
            _mm256_storeu_ps(p[h].as_mut_ptr().add(8), e1);
            l[h] = _mm256_add_ps(l[h], _mm256_add_ps(e0, e1));
        }
        let mut dc = 0;
        while dc < d {
            let mut a = [[_mm256_setzero_ps(); 2]; H];
            for h in 0..H {
                a[h][0] = _mm256_loadu_ps(acc.add(h * d + dc));
                a[h][1] = _mm256_loadu_ps(acc.add(h * d + dc + 8));
                if rescale {
                    let c = _mm256_set1_ps(corr[h]);
                    a[h][0] = _mm256_mul_ps(a[h][0], c);
                    a[h][1] = _mm256_mul_ps(a[h][1], c);
                }
            }
            for t in 0..self.valid {
                let row = (self.tile + t) * d + dc;
                let (v0, v1) = (load::<HALF>(self.v, row), load::<HALF>(self.v, row + 8));
                for h in 0..H {
                    let pb = _mm256_set1_ps(p[h][t]);
                    a[h][0] = _mm256_fmadd_ps(pb, v0, a[h][0]);
                    a[h][1] = _mm256_fmadd_ps(pb, v1, a[h][1]);
                }
            }
            for h in 0..H {
                _mm256_storeu_ps(acc.add(h * d + dc), a[h][0]);
                _mm256_storeu_ps(acc.add(h * d + dc + 8), a[h][1]);
            }
            dc += 16;
        }
    }
}
