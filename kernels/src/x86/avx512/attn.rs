//! Attention tiles with AVX-512: a tile's 16 scores per query head are one vector (keys are
//! stored tile-transposed), the running softmax uses a vector `exp`, and values are summed
//! 32 dimensions at a time for up to 8 query heads.

use crate::attn::{KvHead, Running, EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, RESCALE_AT, TILE};
use crate::attn_q8::{Q8Head, QuantQuery};
use std::arch::x86_64::*;

/// Query heads per pass (16 value accumulators and 8 score vectors fit the 32 registers).
const HEADS: usize = 8;

/// Scale blocks per head an int8 cache may have (head_dim 256 at blocks of 32).
const MAX_BLOCKS: usize = 8;

/// # Safety
/// The CPU must support AVX-512 F, F16C and FMA; `d % 32 == 0`; `kv` holds every tile up
/// to `t1` (checked by `kernels::attn::span`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
pub(crate) unsafe fn span(
    q: &[f32],
    d: usize,
    kv: KvHead,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    let q = q.as_ptr();
    match kv {
        KvHead::F32 { k, v } => {
            let (k, v) = (k.as_ptr().cast(), v.as_ptr().cast());
            span_impl(&Float::<false> { q, d, k, v }, d, t0, t1, run)
        }
        KvHead::F16 { k, v } => {
            let (k, v) = (k.as_ptr().cast(), v.as_ptr().cast());
            span_impl(&Float::<true> { q, d, k, v }, d, t0, t1, run)
        }
        KvHead::Q8(_) | KvHead::Q4(_) => {
            unreachable!("int8 caches take span_q8, 4-bit ones the scalar span")
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

/// Where a tile's scores and value rows come from: an f32 or f16 cache, or an int8 one. The
/// softmax and the value sums around them are one code path.
trait Source {
    /// Scores of query heads `h0..h0 + H` against tile `tile`'s 16 positions (one lane each).
    ///
    /// # Safety
    /// AVX-512 F, BW, VNNI, F16C and FMA; the tile is inside the buffers.
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [__m512; H];
    /// Adds the tile's values weighted by `p` (per head, per position) into `acc` (H × d),
    /// after scaling `acc` by `corr` when `rescale`.
    ///
    /// # Safety
    /// As `scores`; `acc` holds H × d.
    unsafe fn values<const H: usize>(
        &self,
        t: &Tile,
        p: &[[f32; TILE]; H],
        acc: *mut f32,
        rescale: Option<&[f32; H]>,
    );
}

/// The accumulator of `h`'s dimensions `dc..dc + 32`, rescaled.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_acc(acc: *mut f32, at: usize, corr: Option<f32>) -> [__m512; 2] {
    let mut a = [
        _mm512_loadu_ps(acc.add(at)),
        _mm512_loadu_ps(acc.add(at + 16)),
    ];
    if let Some(c) = corr {
        let c = _mm512_set1_ps(c);
        a = [_mm512_mul_ps(a[0], c), _mm512_mul_ps(a[1], c)];
    }
    a
}

/// An f32 (`HALF = false`) or f16 cache and an f32 query.
struct Float<const HALF: bool> {
    q: *const f32,
    d: usize,
    k: *const u8,
    v: *const u8,
}

impl<const HALF: bool> Source for Float<HALF> {
    #[inline]
    #[target_feature(enable = "avx512f,f16c,fma")]
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [__m512; H] {
        let d = self.d;
        // Keys of the tile are 16 lanes per dimension.
        let kt = tile / TILE * d * TILE;
        let mut s = [_mm512_setzero_ps(); H];
        for i in 0..d {
            let kv = load::<HALF>(self.k, kt + i * TILE);
            for (h, sh) in s.iter_mut().enumerate() {
                *sh = _mm512_fmadd_ps(_mm512_set1_ps(*self.q.add((h0 + h) * d + i)), kv, *sh);
            }
        }
        s
    }

    #[inline]
    #[target_feature(enable = "avx512f,f16c,fma")]
    unsafe fn values<const H: usize>(
        &self,
        t: &Tile,
        p: &[[f32; TILE]; H],
        acc: *mut f32,
        rescale: Option<&[f32; H]>,
    ) {
        let d = self.d;
        // 32 dimensions at a time.
        let mut dc = 0;
        while dc < d {
            let mut a = [[_mm512_setzero_ps(); 2]; H];
            for (h, ah) in a.iter_mut().enumerate() {
                *ah = load_acc(acc, h * d + dc, rescale.map(|c| c[h]));
            }
            for lane in 0..t.valid {
                let row = (t.tile + lane) * d + dc;
                let (v0, v1) = (load::<HALF>(self.v, row), load::<HALF>(self.v, row + 16));
                for h in 0..H {
                    let pb = _mm512_set1_ps(p[h][lane]);
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

/// An int8 cache and a quantized query (`kernels::attn_q8`).
struct Q8<'a> {
    qq: &'a QuantQuery,
    d: usize,
    c: Q8Head<'a>,
}

impl Source for Q8<'_> {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [__m512; H] {
        let (d, block) = (self.d, self.c.block);
        let nb = d / block;
        let kt = self.c.k.as_ptr().add(tile / TILE * d * TILE);
        let st = self.c.ks.as_ptr().add(tile / TILE * nb * TILE);
        let q = self.qq.q.as_ptr();
        let flip = _mm512_set1_epi8(-128);
        let mut s = [_mm512_setzero_ps(); H];
        for b in 0..nb {
            let mut acc = [_mm512_setzero_si512(); H];
            for quad in b * block / 4..(b + 1) * block / 4 {
                // 16 positions × 4 dimensions, shifted to unsigned: Σ (k + 128)·q.
                let ku = _mm512_xor_si512(_mm512_loadu_si512(kt.add(quad * 64).cast()), flip);
                for (h, a) in acc.iter_mut().enumerate() {
                    let qb = q
                        .add((h0 + h) * d + quad * 4)
                        .cast::<i32>()
                        .read_unaligned();
                    *a = _mm512_dpbusd_epi32(*a, ku, _mm512_set1_epi32(qb));
                }
            }
            let ksc = _mm512_cvtph_ps(_mm256_loadu_si256(st.add(b * TILE).cast()));
            for h in 0..H {
                let at = (h0 + h) * nb + b;
                let shift = _mm512_set1_epi32(128 * self.qq.sum[at]);
                let dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[h], shift));
                let sc = _mm512_mul_ps(_mm512_set1_ps(self.qq.scale[at]), ksc);
                s[h] = _mm512_fmadd_ps(dot, sc, s[h]);
            }
        }
        s
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
    unsafe fn values<const H: usize>(
        &self,
        t: &Tile,
        p: &[[f32; TILE]; H],
        acc: *mut f32,
        rescale: Option<&[f32; H]>,
    ) {
        let (d, block) = (self.d, self.c.block);
        let nb = d / block;
        assert!(nb <= MAX_BLOCKS);
        let lanes = t.lanes();
        let vt = self.c.v.as_ptr().add(t.tile / TILE * d * TILE);
        let st = self.c.vs.as_ptr().add(t.tile / TILE * nb * TILE);
        // Every head's weight codes per block first (`kernels::attn_q8::weight_codes`, 16
        // lanes at once), so the value vectors below are loaded once for all heads. A head
        // and block without weight keeps codes and scale zero: it adds exactly nothing.
        let mut quads = [[[0i32; 4]; MAX_BLOCKS]; H];
        let mut scale = [[0.0f32; MAX_BLOCKS]; H];
        for b in 0..nb {
            let sv = _mm512_maskz_mov_ps(
                lanes,
                _mm512_cvtph_ps(_mm256_loadu_si256(st.add(b * TILE).cast())),
            );
            for h in 0..H {
                let w = _mm512_mul_ps(_mm512_loadu_ps(p[h].as_ptr()), sv);
                let mx = _mm512_reduce_max_ps(w);
                if !(mx > 0.0 && mx.is_finite()) {
                    continue;
                }
                let codes = _mm512_cvtps_epi32(_mm512_mul_ps(w, _mm512_set1_ps(255.0 / mx)));
                let codes = _mm512_min_epi32(
                    _mm512_max_epi32(codes, _mm512_setzero_si512()),
                    _mm512_set1_epi32(255),
                );
                _mm_storeu_si128(quads[h][b].as_mut_ptr().cast(), _mm512_cvtepi32_epi8(codes));
                scale[h][b] = mx / 255.0;
            }
        }
        // 16 dimensions at a time: four loads (16 dimensions × 4 positions each) serve every
        // head's four `vpdpbusd`.
        for dc in (0..d).step_by(16) {
            let b = dc / block;
            let v = [0, 1, 2, 3].map(|j| _mm512_loadu_si512(vt.add(j * d * 4 + dc * 4).cast()));
            for h in 0..H {
                let mut a = _mm512_loadu_ps(acc.add(h * d + dc));
                if let Some(c) = rescale {
                    a = _mm512_mul_ps(a, _mm512_set1_ps(c[h]));
                }
                let mut sum = _mm512_setzero_si512();
                for (j, vj) in v.iter().enumerate() {
                    sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi32(quads[h][b][j]), *vj);
                }
                let a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(scale[h][b]), a);
                _mm512_storeu_ps(acc.add(h * d + dc), a);
            }
        }
    }
}

/// # Safety
/// The CPU must support AVX-512 F/BW, VNNI, F16C and FMA; `d % 32 == 0`; the buffers hold
/// every tile up to `t1` (checked by `kernels::attn_q8::span`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
pub(crate) unsafe fn span_q8(
    qq: &QuantQuery,
    d: usize,
    c: Q8Head,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    span_impl(&Q8 { qq, d, c }, d, t0, t1, run)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
unsafe fn span_impl<S: Source>(src: &S, d: usize, t0: usize, t1: usize, run: &mut Running) {
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
            let t = Tile { h0, tile, valid };
            let (m, l) = (&mut run.m[h0..h0 + hn], &mut lv[h0..h0 + hn]);
            let acc = run.acc.as_mut_ptr().add(h0 * d);
            match hn {
                8 => t.heads::<S, 8>(src, m, l, acc),
                7 => t.heads::<S, 7>(src, m, l, acc),
                6 => t.heads::<S, 6>(src, m, l, acc),
                5 => t.heads::<S, 5>(src, m, l, acc),
                4 => t.heads::<S, 4>(src, m, l, acc),
                3 => t.heads::<S, 3>(src, m, l, acc),
                2 => t.heads::<S, 2>(src, m, l, acc),
                _ => t.heads::<S, 1>(src, m, l, acc),
            }
            h0 += hn;
        }
        tile += TILE;
    }
    for (l, v) in run.l.iter_mut().zip(&lv) {
        *l = _mm512_reduce_add_ps(*v);
    }
}

/// One tile of positions for a run of query heads from `h0`.
struct Tile {
    h0: usize,
    tile: usize,
    valid: usize,
}

impl Tile {
    /// The lanes of valid positions.
    #[inline]
    fn lanes(&self) -> __mmask16 {
        if self.valid == TILE {
            0xFFFF
        } else {
            ((1u32 << self.valid) - 1) as __mmask16
        }
    }

    /// # Safety
    /// As [`span`]; `H` heads from `h0` in `m`, `l` and `acc` (H × d).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
    unsafe fn heads<S: Source, const H: usize>(
        &self,
        src: &S,
        m: &mut [f32],
        l: &mut [__m512],
        acc: *mut f32,
    ) {
        let s = src.scores::<H>(self.h0, self.tile);
        let lanes = self.lanes();
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
                corr[h] = crate::attn::exp(m[h] - mx);
                l[h] = _mm512_mul_ps(l[h], _mm512_set1_ps(corr[h]));
                m[h] = mx;
                rescale = true;
            }
            let e = exp(_mm512_sub_ps(sm, _mm512_set1_ps(m[h])));
            l[h] = _mm512_add_ps(l[h], e);
            _mm512_storeu_ps(p[h].as_mut_ptr(), e);
        }
        src.values::<H>(self, &p, acc, rescale.then_some(&corr));
    }
}
