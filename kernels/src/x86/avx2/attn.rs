//! Attention tiles with AVX2: as the AVX-512 version (see `attn_avx512`), with a tile's 16
//! scores in two vectors and values summed 16 dimensions at a time for up to 4 query heads.

use crate::attn::{KvHead, Running, EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, RESCALE_AT, TILE};
use crate::attn_q8::{Q8Head, QuantQuery};
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

/// Where a tile's scores and value rows come from (as in the AVX-512 version).
trait Source {
    /// Scores of query heads `h0..h0 + H` against tile `tile`'s 16 positions (two vectors).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; the tile is inside the buffers.
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [[__m256; 2]; H];
    /// Adds the tile's values weighted by `p` into `acc` (H × d), after scaling `acc` by
    /// `corr` when `rescale`.
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

/// The accumulator at `at..at + 8`, rescaled.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load_acc(acc: *mut f32, at: usize, corr: Option<f32>) -> __m256 {
    let a = _mm256_loadu_ps(acc.add(at));
    match corr {
        Some(c) => _mm256_mul_ps(a, _mm256_set1_ps(c)),
        None => a,
    }
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
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [[__m256; 2]; H] {
        let d = self.d;
        let kt = tile / TILE * d * TILE;
        let mut s = [[_mm256_setzero_ps(); 2]; H];
        for i in 0..d {
            let k0 = load::<HALF>(self.k, kt + i * TILE);
            let k1 = load::<HALF>(self.k, kt + i * TILE + 8);
            for (h, sh) in s.iter_mut().enumerate() {
                let qb = _mm256_set1_ps(*self.q.add((h0 + h) * d + i));
                sh[0] = _mm256_fmadd_ps(qb, k0, sh[0]);
                sh[1] = _mm256_fmadd_ps(qb, k1, sh[1]);
            }
        }
        s
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn values<const H: usize>(
        &self,
        t: &Tile,
        p: &[[f32; TILE]; H],
        acc: *mut f32,
        rescale: Option<&[f32; H]>,
    ) {
        let d = self.d;
        let mut dc = 0;
        while dc < d {
            let mut a = [[_mm256_setzero_ps(); 2]; H];
            for (h, ah) in a.iter_mut().enumerate() {
                let c = rescale.map(|c| c[h]);
                *ah = [
                    load_acc(acc, h * d + dc, c),
                    load_acc(acc, h * d + dc + 8, c),
                ];
            }
            for lane in 0..t.valid {
                let row = (t.tile + lane) * d + dc;
                let (v0, v1) = (load::<HALF>(self.v, row), load::<HALF>(self.v, row + 8));
                for h in 0..H {
                    let pb = _mm256_set1_ps(p[h][lane]);
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

/// An int8 cache and a quantized query (`kernels::attn_q8`).
struct Q8<'a> {
    qq: &'a QuantQuery,
    d: usize,
    c: Q8Head<'a>,
}

impl Source for Q8<'_> {
    #[inline]
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [[__m256; 2]; H] {
        let (d, block) = (self.d, self.c.block);
        let nb = d / block;
        let kt = self.c.k.as_ptr().add(tile / TILE * d * TILE);
        let st = self.c.ks.as_ptr().add(tile / TILE * nb * TILE);
        let q = self.qq.q.as_ptr();
        let ones = _mm256_set1_epi16(1);
        let mut s = [[_mm256_setzero_ps(); 2]; H];
        for b in 0..nb {
            let mut acc = [[_mm256_setzero_si256(); 2]; H];
            for quad in b * block / 4..(b + 1) * block / 4 {
                for j in 0..2 {
                    // 8 positions × 4 dimensions. `vpmaddubsw` multiplies unsigned by signed
                    // bytes: |k| times q carrying k's sign, pairs at most 2·127² (no i16
                    // saturation).
                    let k = _mm256_loadu_si256(kt.add(quad * 64 + 32 * j).cast());
                    let ka = _mm256_abs_epi8(k);
                    for (h, a) in acc.iter_mut().enumerate() {
                        let qb = q
                            .add((h0 + h) * d + quad * 4)
                            .cast::<i32>()
                            .read_unaligned();
                        let qs = _mm256_sign_epi8(_mm256_set1_epi32(qb), k);
                        let pairs = _mm256_maddubs_epi16(ka, qs);
                        a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            let k0 = _mm256_cvtph_ps(_mm_loadu_si128(st.add(b * TILE).cast()));
            let k1 = _mm256_cvtph_ps(_mm_loadu_si128(st.add(b * TILE + 8).cast()));
            for h in 0..H {
                let qs = _mm256_set1_ps(self.qq.scale[(h0 + h) * nb + b]);
                for (j, ksc) in [k0, k1].into_iter().enumerate() {
                    let dot = _mm256_cvtepi32_ps(acc[h][j]);
                    s[h][j] = _mm256_fmadd_ps(dot, _mm256_mul_ps(qs, ksc), s[h][j]);
                }
            }
        }
        s
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn values<const H: usize>(
        &self,
        t: &Tile,
        p: &[[f32; TILE]; H],
        acc: *mut f32,
        rescale: Option<&[f32; H]>,
    ) {
        let (d, block) = (self.d, self.c.block);
        let nb = d / block;
        let vt = self.c.v.as_ptr().add(t.tile / TILE * d * TILE);
        let st = self.c.vs.as_ptr().add(t.tile / TILE * nb * TILE);
        // The valid lanes (positions) of the tile, as masks for its two halves.
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let valid = _mm256_set1_epi32(t.valid as i32);
        let keep = [
            _mm256_castsi256_ps(_mm256_cmpgt_epi32(valid, lane)),
            _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                valid,
                _mm256_add_epi32(lane, _mm256_set1_epi32(8)),
            )),
        ];
        for b in 0..nb {
            let sv = [0, 1].map(|j| {
                let h = _mm_loadu_si128(st.add(b * TILE + 8 * j).cast());
                _mm256_and_ps(_mm256_cvtph_ps(h), keep[j])
            });
            for (h, ph) in p.iter().enumerate() {
                let corr = rescale.map(|c| c[h]);
                // `kernels::attn_q8::weight_codes`, 8 lanes at a time (the same float
                // operations, rounding to nearest even).
                let w =
                    [0, 1].map(|j| _mm256_mul_ps(_mm256_loadu_ps(ph.as_ptr().add(8 * j)), sv[j]));
                let mx = hmax(_mm256_max_ps(w[0], w[1]));
                let ok = mx > 0.0 && mx.is_finite();
                let (inv, scale) = if ok {
                    (255.0 / mx, mx / 255.0)
                } else {
                    (0.0, 0.0)
                };
                let codes = w.map(|x| {
                    let c = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(inv)));
                    _mm256_min_epi32(
                        _mm256_max_epi32(c, _mm256_setzero_si256()),
                        _mm256_set1_epi32(255),
                    )
                });
                // 16 codes as i16 in order, then each position quad's four broadcast.
                let c16 = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(
                    codes[0], codes[1],
                ));
                let cw = [
                    _mm256_permute4x64_epi64::<0b00_00_00_00>(c16),
                    _mm256_permute4x64_epi64::<0b01_01_01_01>(c16),
                    _mm256_permute4x64_epi64::<0b10_10_10_10>(c16),
                    _mm256_permute4x64_epi64::<0b11_11_11_11>(c16),
                ];
                for dc in (b * block..(b + 1) * block).step_by(8) {
                    let a = load_acc(acc, h * d + dc, corr);
                    let a = if !ok {
                        a
                    } else {
                        // Σ code · v per dimension, exact: products of two i16 summed in i32.
                        let (mut x, mut y) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        for (j, w) in cw.iter().enumerate() {
                            let base = vt.add(j * d * 4 + dc * 4);
                            let lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(base.cast()));
                            let hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(base.add(16).cast()));
                            x = _mm256_add_epi32(x, _mm256_madd_epi16(lo, *w));
                            y = _mm256_add_epi32(y, _mm256_madd_epi16(hi, *w));
                        }
                        // Pairs of partial sums to one per dimension, back in order.
                        let sum =
                            _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(x, y));
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(scale), a)
                    };
                    _mm256_storeu_ps(acc.add(h * d + dc), a);
                }
            }
        }
    }
}

/// # Safety
/// The CPU must support AVX2, F16C and FMA; `d % 16 == 0`; the buffers hold every tile up
/// to `t1` (checked by `kernels::attn_q8::span`).
#[target_feature(enable = "avx2,f16c,fma")]
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
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn span_impl<S: Source>(src: &S, d: usize, t0: usize, t1: usize, run: &mut Running) {
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
            let t = Tile { h0, tile, valid };
            let (m, l) = (&mut run.m[h0..h0 + hn], &mut lv[h0..h0 + hn]);
            let acc = run.acc.as_mut_ptr().add(h0 * d);
            match hn {
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
        *l = super::q4::hsum(*v);
    }
}

/// One tile of positions for a run of query heads from `h0`.
struct Tile {
    h0: usize,
    tile: usize,
    valid: usize,
}

impl Tile {
    /// # Safety
    /// As [`span`]; `H` heads from `h0` in `m`, `l` and `acc` (H × d).
    #[inline]
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn heads<S: Source, const H: usize>(
        &self,
        src: &S,
        m: &mut [f32],
        l: &mut [__m256],
        acc: *mut f32,
    ) {
        let s = src.scores::<H>(self.h0, self.tile);
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
                corr[h] = crate::attn::exp(m[h] - mx);
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
        src.values::<H>(self, &p, acc, rescale.then_some(&corr));
    }
}
