//! Attention tiles with NEON: as the AVX2 version (see `x86/avx2/attn.rs`), with a tile's 16
//! scores in four vectors and values summed 16 dimensions at a time for up to 4 query heads.
//! f16 keys and values widen with `fcvtl`/`fcvtl2`; int8 keys score by `Dot` (`smull` or
//! `sdot`) on their 4-dimension quads, as `kernels::attn_q8` lays them out.

use super::{exp, load_f16x8, Dot};
use crate::attn::{KvHead, Running, RESCALE_AT, TILE};
use crate::attn_q8::{scale_at, weight_codes, Q8Head, QuantQuery};
use std::arch::aarch64::*;

const HEADS: usize = 4;

/// # Safety
/// `d % 16 == 0`; `kv` holds every tile up to `t1` (checked by `kernels::attn::span`).
#[target_feature(enable = "neon")]
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
#[inline(always)]
unsafe fn load8<const HALF: bool>(p: *const u8, at: usize) -> (float32x4_t, float32x4_t) {
    if HALF {
        // SAFETY: the caller keeps `at + 8` inside the buffer (f16 elements).
        load_f16x8(p.add(at * 2))
    } else {
        // SAFETY: as above, f32 elements.
        let f = p.cast::<f32>().add(at);
        (vld1q_f32(f), vld1q_f32(f.add(4)))
    }
}

/// Where a tile's scores and value rows come from (as in the x86 versions).
trait Source {
    /// Scores of query heads `h0..h0 + H` against tile `tile`'s 16 positions (four vectors).
    ///
    /// # Safety
    /// The tile is inside the buffers.
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [[float32x4_t; 4]; H];
    /// Adds the tile's values weighted by `p` into `acc` (H × d), after scaling `acc` by
    /// `corr` when `rescale`.
    ///
    /// # Safety
    /// The tile is inside the buffers; `acc` holds H × d.
    unsafe fn values<const H: usize>(
        &self,
        t: &Tile,
        p: &[[f32; TILE]; H],
        acc: *mut f32,
        rescale: Option<&[f32; H]>,
    );
}

/// Four accumulator vectors from `at`, rescaled.
#[inline(always)]
unsafe fn load_acc(acc: *mut f32, at: usize, corr: Option<f32>) -> [float32x4_t; 4] {
    let a = [0, 1, 2, 3].map(|j| vld1q_f32(acc.add(at + 4 * j)));
    match corr {
        Some(c) => a.map(|x| vmulq_n_f32(x, c)),
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
    #[inline(always)]
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [[float32x4_t; 4]; H] {
        let d = self.d;
        let kt = tile / TILE * d * TILE;
        let mut s = [[vdupq_n_f32(0.0); 4]; H];
        for i in 0..d {
            let (k0, k1) = load8::<HALF>(self.k, kt + i * TILE);
            let (k2, k3) = load8::<HALF>(self.k, kt + i * TILE + 8);
            for (h, sh) in s.iter_mut().enumerate() {
                let qb = *self.q.add((h0 + h) * d + i);
                sh[0] = vfmaq_n_f32(sh[0], k0, qb);
                sh[1] = vfmaq_n_f32(sh[1], k1, qb);
                sh[2] = vfmaq_n_f32(sh[2], k2, qb);
                sh[3] = vfmaq_n_f32(sh[3], k3, qb);
            }
        }
        s
    }

    #[inline(always)]
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
            let mut a = [[vdupq_n_f32(0.0); 4]; H];
            for (h, ah) in a.iter_mut().enumerate() {
                *ah = load_acc(acc, h * d + dc, rescale.map(|c| c[h]));
            }
            for lane in 0..t.valid {
                let row = (t.tile + lane) * d + dc;
                let (v0, v1) = load8::<HALF>(self.v, row);
                let (v2, v3) = load8::<HALF>(self.v, row + 8);
                for h in 0..H {
                    let pb = p[h][lane];
                    a[h][0] = vfmaq_n_f32(a[h][0], v0, pb);
                    a[h][1] = vfmaq_n_f32(a[h][1], v1, pb);
                    a[h][2] = vfmaq_n_f32(a[h][2], v2, pb);
                    a[h][3] = vfmaq_n_f32(a[h][3], v3, pb);
                }
            }
            for h in 0..H {
                for j in 0..4 {
                    vst1q_f32(acc.add(h * d + dc + 4 * j), a[h][j]);
                }
            }
            dc += 16;
        }
    }
}

/// An int8 cache and a quantized query (`kernels::attn_q8`), dot products by `D`.
struct Q8<'a, D: Dot> {
    qq: &'a QuantQuery,
    d: usize,
    c: Q8Head<'a>,
    dot: std::marker::PhantomData<D>,
}

/// One 4-dimension quad `L` of the query vectors `qv` against 16 positions' codes at `kq`.
#[inline(always)]
unsafe fn quad<D: Dot, const L: i32, const H: usize>(
    kq: *const i8,
    qv: &[int8x16_t; H],
    acc: &mut [[int32x4_t; 4]; H],
) {
    let k = [0, 1, 2, 3].map(|j| vld1q_s8(kq.add(16 * j)));
    for h in 0..H {
        for j in 0..4 {
            acc[h][j] = D::dot::<L>(acc[h][j], k[j], qv[h]);
        }
    }
}

impl<D: Dot> Source for Q8<'_, D> {
    #[inline(always)]
    unsafe fn scores<const H: usize>(&self, h0: usize, tile: usize) -> [[float32x4_t; 4]; H] {
        let (d, block) = (self.d, self.c.block);
        let nb = d / block;
        let kt = self.c.k.as_ptr().add(tile / TILE * d * TILE);
        let st = self.c.ks.as_ptr().add(tile / TILE * nb * TILE).cast::<u8>();
        let q = self.qq.q.as_ptr();
        let mut s = [[vdupq_n_f32(0.0); 4]; H];
        for b in 0..nb {
            let mut acc = [[vdupq_n_s32(0); 4]; H];
            // 16 dimensions (four quads) per query load.
            for qg in b * block / 16..(b + 1) * block / 16 {
                let mut qv = [vdupq_n_s8(0); H];
                for (h, v) in qv.iter_mut().enumerate() {
                    *v = vld1q_s8(q.add((h0 + h) * d + qg * 16));
                }
                let kq = kt.add(qg * 4 * 64);
                quad::<D, 0, H>(kq, &qv, &mut acc);
                quad::<D, 1, H>(kq.add(64), &qv, &mut acc);
                quad::<D, 2, H>(kq.add(128), &qv, &mut acc);
                quad::<D, 3, H>(kq.add(192), &qv, &mut acc);
            }
            let (k0, k1) = load_f16x8(st.add(b * TILE * 2));
            let (k2, k3) = load_f16x8(st.add(b * TILE * 2 + 16));
            let ksc = [k0, k1, k2, k3];
            for h in 0..H {
                let qs = self.qq.scale[(h0 + h) * nb + b];
                for j in 0..4 {
                    let dot = vcvtq_f32_s32(acc[h][j]);
                    s[h][j] = vfmaq_f32(s[h][j], dot, vmulq_n_f32(ksc[j], qs));
                }
            }
        }
        s
    }

    #[inline(always)]
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
        for b in 0..nb {
            let mut sv = [0.0f32; TILE];
            for (lane, x) in sv.iter_mut().enumerate().take(t.valid) {
                *x = self.c.vs[scale_at(nb, t.tile + lane, b)].to_f32();
            }
            for (h, ph) in p.iter().enumerate() {
                let corr = rescale.map(|c| c[h]);
                let (codes, scale) = weight_codes(ph, &sv, t.valid);
                // Each position quad's four codes as i16, twice.
                let cw = [0, 1, 2, 3].map(|j| {
                    let c = [0, 1, 2, 3, 0, 1, 2, 3].map(|i| codes[4 * j + i] as i16);
                    vld1q_s16(c.as_ptr())
                });
                for dc in (b * block..(b + 1) * block).step_by(16) {
                    let mut a = load_acc(acc, h * d + dc, corr);
                    if scale != 0.0 {
                        // Σ code · v per dimension, exact: i16 products summed in i32, four
                        // dimensions (16 bytes: 4 dimensions × 4 positions) per load.
                        for (g, ag) in a.iter_mut().enumerate() {
                            let mut s = [vdupq_n_s32(0); 4];
                            for (j, w) in cw.iter().enumerate() {
                                let v = vld1q_s8(vt.add(j * d * 4 + (dc + 4 * g) * 4));
                                let (lo, hi) = (vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v));
                                s[0] = vmlal_s16(s[0], vget_low_s16(lo), vget_low_s16(*w));
                                s[1] = vmlal_high_s16(s[1], lo, *w);
                                s[2] = vmlal_s16(s[2], vget_low_s16(hi), vget_low_s16(*w));
                                s[3] = vmlal_high_s16(s[3], hi, *w);
                            }
                            let sum = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
                            *ag = vfmaq_n_f32(*ag, vcvtq_f32_s32(sum), scale);
                        }
                    }
                    for (j, aj) in a.iter().enumerate() {
                        vst1q_f32(acc.add(h * d + dc + 4 * j), *aj);
                    }
                }
            }
        }
    }
}

/// # Safety
/// NEON; `d % 16 == 0`; the buffers hold every tile up to `t1` (checked by
/// `kernels::attn_q8::span`).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn span_q8<D: Dot>(
    qq: &QuantQuery,
    d: usize,
    c: Q8Head,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    let src = Q8::<D> {
        qq,
        d,
        c,
        dot: std::marker::PhantomData,
    };
    span_impl(&src, d, t0, t1, run)
}

/// # Safety
/// As [`span_q8`], and the CPU has dotprod.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn span_q8_dotprod(
    qq: &QuantQuery,
    d: usize,
    c: Q8Head,
    t0: usize,
    t1: usize,
    run: &mut Running,
) {
    let src = Q8::<super::Sdot> {
        qq,
        d,
        c,
        dot: std::marker::PhantomData,
    };
    span_impl(&src, d, t0, t1, run)
}

#[inline(always)]
unsafe fn span_impl<S: Source>(src: &S, d: usize, t0: usize, t1: usize, run: &mut Running) {
    let g = run.m.len();
    // Each head's sum of exponentials per lane for the span, reduced at the end.
    let mut lv: Vec<float32x4_t> = run
        .l
        .iter()
        .map(|&l| vsetq_lane_f32::<0>(l, vdupq_n_f32(0.0)))
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
        *l = vaddvq_f32(*v);
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
    #[inline(always)]
    unsafe fn heads<S: Source, const H: usize>(
        &self,
        src: &S,
        m: &mut [f32],
        l: &mut [float32x4_t],
        acc: *mut f32,
    ) {
        let s = src.scores::<H>(self.h0, self.tile);
        let mut p = [[0.0f32; TILE]; H];
        // Lazy rescaling, as `kernels::attn::span_scalar`.
        let mut corr = [1.0f32; H];
        let mut rescale = false;
        for h in 0..H {
            let mut sc = [0.0f32; TILE];
            for j in 0..4 {
                vst1q_f32(sc.as_mut_ptr().add(4 * j), s[h][j]);
            }
            sc[self.valid..].fill(f32::NEG_INFINITY);
            let sv = [0, 4, 8, 12].map(|j| vld1q_f32(sc.as_ptr().add(j)));
            let mx = vmaxvq_f32(vmaxq_f32(vmaxq_f32(sv[0], sv[1]), vmaxq_f32(sv[2], sv[3])));
            if mx > m[h] + RESCALE_AT {
                corr[h] = crate::attn::exp(m[h] - mx);
                l[h] = vmulq_n_f32(l[h], corr[h]);
                m[h] = mx;
                rescale = true;
            }
            let mb = vdupq_n_f32(m[h]);
            for j in 0..4 {
                let e = exp(vsubq_f32(sv[j], mb));
                vst1q_f32(p[h].as_mut_ptr().add(4 * j), e);
                l[h] = vaddq_f32(l[h], e);
            }
        }
        src.values::<H>(self, &p, acc, rescale.then_some(&corr));
    }
}
