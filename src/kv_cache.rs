//! The key/value cache: for every layer and KV head, the rotated keys and the values of every
//! position so far, in f16 (the default: half the memory and bandwidth) or f32 (the exact
//! reference). Keys are tile-transposed for the attention kernels (see `kernels::attn`):
//! `[tile][head_dim][16 positions]`; values are one row per position.

use crate::kernels::attn::{KvHead, TILE};
use half::f16;

/// The element type of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPrecision {
    F16,
    F32,
}

impl KvPrecision {
    /// f16, unless `POCKET_KV=f32` or the exact path is on (`POCKET_ACT=f32`: f32
    /// activations and an f32 cache, the reference the fast path is measured against).
    pub fn default_from_env() -> KvPrecision {
        let exact = crate::kernels::activations() == crate::kernels::Activations::F32;
        match std::env::var("POCKET_KV").as_deref() {
            Ok("f32") => KvPrecision::F32,
            Ok("f16") => KvPrecision::F16,
            _ if exact => KvPrecision::F32,
            _ => KvPrecision::F16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvPrecision::F16 => "f16",
            KvPrecision::F32 => "f32",
        }
    }
}

pub struct KvCache {
    layers: Vec<Vec<HeadCache>>,
    /// Positions pushed to each layer (the last layer's count completes a position).
    layer_len: Vec<usize>,
    head_dim: usize,
    len: usize,
    capacity: usize,
    precision: KvPrecision,
}

enum HeadCache {
    F32 { k: Vec<f32>, v: Vec<f32> },
    F16 { k: Vec<f16>, v: Vec<f16> },
}

/// One layer's cache, as the attention kernels read it.
pub struct LayerKv<'a> {
    heads: &'a [HeadCache],
}

impl LayerKv<'_> {
    pub fn head(&self, h: usize) -> KvHead<'_> {
        match &self.heads[h] {
            HeadCache::F32 { k, v } => KvHead::F32 { k, v },
            HeadCache::F16 { k, v } => KvHead::F16 { k, v },
        }
    }
}

impl KvCache {
    /// A cache for `num_layers` layers of `kv_heads` heads of `head_dim`, holding at most
    /// `capacity` positions. Memory grows with use, not with capacity.
    pub fn new(
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        precision: KvPrecision,
    ) -> KvCache {
        let head = || match precision {
            KvPrecision::F32 => HeadCache::F32 {
                k: Vec::new(),
                v: Vec::new(),
            },
            KvPrecision::F16 => HeadCache::F16 {
                k: Vec::new(),
                v: Vec::new(),
            },
        };
        KvCache {
            layers: (0..num_layers)
                .map(|_| (0..kv_heads).map(|_| head()).collect())
                .collect(),
            layer_len: vec![0; num_layers],
            head_dim,
            len: 0,
            capacity,
            precision,
        }
    }

    /// Positions stored (equal in every layer once a step is complete).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn precision(&self) -> KvPrecision {
        self.precision
    }

    /// Bytes held by the cache's elements.
    pub fn bytes(&self) -> usize {
        let per = match self.precision {
            KvPrecision::F16 => 2,
            KvPrecision::F32 => 4,
        };
        self.layers
            .iter()
            .flatten()
            .map(|h| match h {
                HeadCache::F32 { k, v } => k.len() + v.len(),
                HeadCache::F16 { k, v } => k.len() + v.len(),
            })
            .sum::<usize>()
            * per
    }

    /// Appends one position's keys and values (`kv_heads × head_dim` each) for `layer`. The
    /// last layer's push completes the position.
    pub fn push(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let d = self.head_dim;
        let pos = self.layer_len[layer];
        let (tile, lane) = (pos / TILE * d * TILE, pos % TILE);
        for (h, hc) in self.layers[layer].iter_mut().enumerate() {
            let (kh, vh) = (&k[h * d..(h + 1) * d], &v[h * d..(h + 1) * d]);
            match hc {
                HeadCache::F32 { k, v } => {
                    if lane == 0 {
                        k.resize(tile + d * TILE, 0.0);
                    }
                    for (i, &x) in kh.iter().enumerate() {
                        k[tile + i * TILE + lane] = x;
                    }
                    v.extend_from_slice(vh);
                }
                HeadCache::F16 { k, v } => {
                    if lane == 0 {
                        k.resize(tile + d * TILE, f16::ZERO);
                    }
                    for (i, &x) in kh.iter().enumerate() {
                        k[tile + i * TILE + lane] = f16::from_f32(x);
                    }
                    v.extend(vh.iter().map(|&x| f16::from_f32(x)));
                }
            }
        }
        self.layer_len[layer] += 1;
        if layer + 1 == self.layers.len() {
            self.len += 1;
        }
    }

    /// `layer`'s cache (positions `0..n`, n = positions pushed to that layer).
    pub fn layer(&self, layer: usize) -> LayerKv<'_> {
        LayerKv {
            heads: &self.layers[layer],
        }
    }

    /// Forgets every position from `n` on (a conversation edited or rolled back).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        let d = self.head_dim;
        let (kl, vl) = (n.div_ceil(TILE) * TILE * d, n * d);
        for hc in self.layers.iter_mut().flatten() {
            match hc {
                HeadCache::F32 { k, v } => {
                    k.truncate(kl);
                    v.truncate(vl);
                }
                HeadCache::F16 { k, v } => {
                    k.truncate(kl);
                    v.truncate(vl);
                }
            }
        }
        self.layer_len.iter_mut().for_each(|l| *l = n);
        self.len = n;
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }
}
