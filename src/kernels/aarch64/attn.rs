//! Attention tiles with NEON: as the AVX2 version (see `x86/avx2/attn.rs`), with a tile's 16
//! scores in four vectors and values summed 16 dimensions at a time for up to 4 query heads.
//! f16 keys and values widen with `fcvtl`/`fcvtl2`.

use super::{exp, load_f16x8};
use crate::kernels::attn::{KvHead, Running, RESCALE_AT, TILE};
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

#[inline(always)]
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
        *l = vaddvq_f32(*v);
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
    #[inline(always)]
    unsafe fn heads<const HALF: bool, const H: usize>(
        &self,
        m: &mut [f32],
        l: &mut [float32x4_t],
        acc: *mut f32,
    ) {
        let d = self.d;
        let kt = self.tile / TILE * d * TILE;
        let mut s = [[vdupq_n_f32(0.0); 4]; H];
        for i in 0..d {
            let (k0, k1) = load8::<HALF>(self.k, kt + i * TILE);
            let (k2, k3) = load8::<HALF>(self.k, kt + i * TILE + 8);
            for (h, sh) in s.iter_mut().enumerate() {
                let qb = *self.q.add(h * d + i);
                sh[0] = vfmaq_n_f32(sh[0], k0, qb);
                sh[1] = vfmaq_n_f32(sh[1], k1, qb);
                sh[2] = vfmaq_n_f32(sh[2], k2, qb);
                sh[3] = vfmaq_n_f32(sh[3], k3, qb);
            }
        }
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
                corr[h] = crate::kernels::attn::exp(m[h] - mx);
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
        let mut dc = 0;
        while dc < d {
            let mut a = [[vdupq_n_f32(0.0); 4]; H];
            for h in 0..H {
                for j in 0..4 {
                    a[h][j] = vld1q_f32(acc.add(h * d + dc + 4 * j));
                    if rescale {
                        a[h][j] = vmulq_n_f32(a[h][j], corr[h]);
                    }
                }
            }
            for t in 0..self.valid {
                let row = (self.tile + t) * d + dc;
                let (v0, v1) = load8::<HALF>(self.v, row);
                let (v2, v3) = load8::<HALF>(self.v, row + 8);
                for h in 0..H {
                    let pb = p[h][t];
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
