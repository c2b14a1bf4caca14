//! The key/value cache: for every layer and KV head, the rotated keys and the values of every
//! position so far, in f16 (the default: half the memory and bandwidth), f32 (the exact
//! reference) or int8 with an f16 scale per block of 32 dimensions (`--kv q8`: half of f16
//! again, see `kernels::attn_q8`), or 4-bit (`--kv q4`, q4_0's rounding, two codes per byte
//! in the int8 layout: kept to measure, scalar attention only, see `kernels::attn_q4`). Keys are tile-transposed for the attention kernels (see
//! `kernels::attn`): `[tile][head_dim][16 positions]` (int8: `[tile][head_dim/4][16][4]`);
//! values are one row per position.
//!
//! A sliding-window layer (Gemma's local layers) keeps a ring of [`ring_slots`] positions
//! instead of all of them: position `p` lives in slot `p % slots`. The ring is longer than the
//! window by a slack, so a batch of up to [`KvCache::batch_limit`] tokens can be pushed before
//! its tokens attend without overwriting a key one of them still needs.

use crate::kernels::attn::{q8_block, quantize_q4, quantize_q8, KvHead, Q4Head, Q8Head, TILE};
use crate::kernels::attn_q4::{self, nibble, set_nibble};
use crate::kernels::attn_q8::{key_at, scale_at, value_at};
use half::f16;

mod head;
use head::{HeadCache, Lens};

/// The element type of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPrecision {
    F16,
    F32,
    /// int8 codes, an f16 scale per position, KV head and block of 32 (or 16) dimensions.
    Q8,
    /// 4-bit codes with q8's scales (q4_0): a measurement, not a default (it misses the
    /// quality bar on small models); scalar attention.
    Q4,
}

impl KvPrecision {
    pub fn name(self) -> &'static str {
        match self {
            KvPrecision::F16 => "f16",
            KvPrecision::F32 => "f32",
            KvPrecision::Q8 => "q8",
            KvPrecision::Q4 => "q4",
        }
    }

    pub fn parse(s: &str) -> Option<KvPrecision> {
        match s {
            "f16" => Some(KvPrecision::F16),
            "f32" => Some(KvPrecision::F32),
            "q8" => Some(KvPrecision::Q8),
            "q4" => Some(KvPrecision::Q4),
            _ => None,
        }
    }

    /// Bytes one KV head of `head_dim` holds for `positions` (keys and values, scales
    /// included; keys, and int8 values, fill whole tiles): what `--ctx` is checked against
    /// before a cache is made, and what [`KvCache::bytes`] reports once it is filled.
    pub fn head_bytes(self, head_dim: usize, positions: usize) -> usize {
        let tiled = positions.next_multiple_of(TILE);
        match self {
            KvPrecision::F32 => 4 * head_dim * (tiled + positions),
            KvPrecision::F16 => 2 * head_dim * (tiled + positions),
            KvPrecision::Q8 => {
                let nb = head_dim / q8_block(head_dim).unwrap_or(head_dim.max(1));
                2 * tiled * (head_dim + 2 * nb)
            }
            KvPrecision::Q4 => {
                let nb = head_dim / q8_block(head_dim).unwrap_or(head_dim.max(1));
                2 * attn_q4::buffer_bytes(tiled / TILE, head_dim) + 4 * tiled * nb
            }
        }
    }
}

/// Ring slots for a sliding window of `window` positions: the window rounded up to whole key
/// tiles (so a position and its slot share their place in a tile), plus a slack of up to 256
/// positions (a prefill batch's worth).
pub fn ring_slots(window: usize) -> usize {
    let w = window.next_multiple_of(TILE);
    w + w.clamp(TILE, 256)
}

#[derive(Clone)]
#[cfg_attr(test, derive(PartialEq))]
pub struct KvCache {
    layers: Vec<Vec<HeadCache>>,
    /// Per layer: the ring's slots (a sliding-window layer) and its window, or `None`.
    rings: Vec<Option<(usize, usize)>>,
    /// Positions pushed to each layer (the last layer's count completes a position).
    layer_len: Vec<usize>,
    head_dim: usize,
    /// Dimensions per scale of an int8 or 4-bit cache.
    block: usize,
    len: usize,
    capacity: usize,
    precision: KvPrecision,
}

/// One layer's cache, as the attention kernels read it.
pub struct LayerKv<'a> {
    heads: &'a [HeadCache],
    slots: Option<usize>,
    block: usize,
}

impl LayerKv<'_> {
    /// The ring's length when positions are stored modulo it (a sliding-window layer).
    pub fn ring(&self) -> Option<usize> {
        self.slots
    }

    pub fn head(&self, h: usize) -> KvHead<'_> {
        match &self.heads[h] {
            HeadCache::F32 { k, v } => KvHead::F32 { k, v },
            HeadCache::F16 { k, v } => KvHead::F16 { k, v },
            HeadCache::Q8 { k, ks, v, vs } => KvHead::Q8(Q8Head {
                k,
                ks,
                v,
                vs,
                block: self.block,
            }),
            HeadCache::Q4 { k, ks, v, vs } => KvHead::Q4(Q4Head {
                k,
                ks,
                v,
                vs,
                block: self.block,
            }),
        }
    }
}

impl KvCache {
    /// A cache for `num_layers` layers of `kv_heads` heads of `head_dim`, holding at most
    /// `capacity` positions. Memory grows with use, not with capacity. An int8 cache needs
    /// `head_dim` a multiple of 16 (`Model::load` refuses the others).
    pub fn new(
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        precision: KvPrecision,
    ) -> KvCache {
        let head = || HeadCache::new(precision);
        let block = match precision {
            KvPrecision::Q8 | KvPrecision::Q4 => {
                q8_block(head_dim).expect("an int8 or 4-bit cache needs head_dim % 16 == 0")
            }
            _ => head_dim,
        };
        KvCache {
            layers: (0..num_layers)
                .map(|_| (0..kv_heads).map(|_| head()).collect())
                .collect(),
            rings: vec![None; num_layers],
            layer_len: vec![0; num_layers],
            head_dim,
            block,
            len: 0,
            capacity,
            precision,
        }
    }

    /// Sliding-window layers (`windows[layer]`) keep only a ring of positions.
    pub fn with_windows(mut self, windows: &[Option<usize>]) -> KvCache {
        assert!(self.len == 0 && windows.len() == self.layers.len());
        self.rings = windows
            .iter()
            .map(|w| w.map(|w| (ring_slots(w), w)))
            .collect();
        self
    }

    /// The most tokens `layer` takes in one batch before they attend: a ring keeps every key
    /// the batch's first token needs only that long.
    pub fn batch_limit(&self, layer: usize) -> Option<usize> {
        self.rings[layer].map(|(slots, w)| slots - w + 1)
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

    /// Bytes held by the cache's elements (scales included; a partly filled last key tile
    /// counts whole).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|h| match h {
                HeadCache::F32 { k, v } => 4 * (k.len() + v.len()),
                HeadCache::F16 { k, v } => 2 * (k.len() + v.len()),
                HeadCache::Q8 { k, ks, v, vs } => k.len() + v.len() + 2 * (ks.len() + vs.len()),
                HeadCache::Q4 { k, ks, v, vs } => k.len() + v.len() + 2 * (ks.len() + vs.len()),
            })
            .sum::<usize>()
    }

    /// Appends one position's keys and values (`kv_heads × head_dim` each) for `layer`. The
    /// last layer's push completes the position.
    pub fn push(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let d = self.head_dim;
        let pos = self.layer_len[layer];
        let slot = match self.rings[layer] {
            Some((slots, _)) => pos % slots,
            None => pos,
        };
        let (tile, lane) = (slot / TILE * d * TILE, slot % TILE);
        let (block, nb) = (self.block, d / self.block);
        // One block's codes (blocks are at most 32): on the stack, as every push of every
        // layer comes here.
        let mut codes = [0i8; 32];
        for (h, hc) in self.layers[layer].iter_mut().enumerate() {
            let (kh, vh) = (&k[h * d..(h + 1) * d], &v[h * d..(h + 1) * d]);
            match hc {
                HeadCache::F32 { k, v } => {
                    if k.len() < tile + d * TILE {
                        k.resize(tile + d * TILE, 0.0);
                    }
                    for (i, &x) in kh.iter().enumerate() {
                        k[tile + i * TILE + lane] = x;
                    }
                    if v.len() == slot * d {
                        v.extend_from_slice(vh);
                    } else {
                        v[slot * d..(slot + 1) * d].copy_from_slice(vh);
                    }
                }
                HeadCache::F16 { k, v } => {
                    if k.len() < tile + d * TILE {
                        k.resize(tile + d * TILE, f16::ZERO);
                    }
                    for (i, &x) in kh.iter().enumerate() {
                        k[tile + i * TILE + lane] = f16::from_f32(x);
                    }
                    if v.len() == slot * d {
                        v.extend(vh.iter().map(|&x| f16::from_f32(x)));
                    } else {
                        for (o, &x) in v[slot * d..(slot + 1) * d].iter_mut().zip(vh) {
                            *o = f16::from_f32(x);
                        }
                    }
                }
                HeadCache::Q8 { k, ks, v, vs } => {
                    let tiles = slot / TILE + 1;
                    if k.len() < tiles * TILE * d {
                        for buf in [&mut *k, &mut *v] {
                            buf.resize(tiles * TILE * d, 0);
                        }
                        for buf in [&mut *ks, &mut *vs] {
                            buf.resize(tiles * TILE * nb, f16::ZERO);
                        }
                    }
                    for b in 0..nb {
                        let r = b * block..(b + 1) * block;
                        ks[scale_at(nb, slot, b)] =
                            quantize_q8(&kh[r.clone()], &mut codes[..block]);
                        for (j, &c) in codes[..block].iter().enumerate() {
                            k[key_at(d, slot, r.start + j)] = c;
                        }
                        vs[scale_at(nb, slot, b)] =
                            quantize_q8(&vh[r.clone()], &mut codes[..block]);
                        for (j, &c) in codes[..block].iter().enumerate() {
                            v[value_at(d, slot, r.start + j)] = c;
                        }
                    }
                }
                HeadCache::Q4 { k, ks, v, vs } => {
                    let tiles = slot / TILE + 1;
                    if k.len() < attn_q4::buffer_bytes(tiles, d) {
                        for buf in [&mut *k, &mut *v] {
                            buf.resize(attn_q4::buffer_bytes(tiles, d), 0x88);
                        }
                        for buf in [&mut *ks, &mut *vs] {
                            buf.resize(tiles * TILE * nb, f16::ZERO);
                        }
                    }
                    for b in 0..nb {
                        let r = b * block..(b + 1) * block;
                        ks[scale_at(nb, slot, b)] =
                            quantize_q4(&kh[r.clone()], &mut codes[..block]);
                        for (j, &c) in codes[..block].iter().enumerate() {
                            set_nibble(k, key_at(d, slot, r.start + j), c);
                        }
                        vs[scale_at(nb, slot, b)] =
                            quantize_q4(&vh[r.clone()], &mut codes[..block]);
                        for (j, &c) in codes[..block].iter().enumerate() {
                            set_nibble(v, value_at(d, slot, r.start + j), c);
                        }
                    }
                }
            }
        }
        self.layer_len[layer] += 1;
        if layer + 1 == self.layers.len() {
            self.len += 1;
        }
    }

    /// Drops positions `from..from + count` and moves the later ones down by `count` (a
    /// context shift: the oldest turns leave, the newest stay without being run again).
    /// `rotate(layer, key)` turns a moved key (one KV head, f32) to its new position. Keys of
    /// f16 and int8 caches are decoded, rotated and stored again; values move unchanged.
    /// Returns false, changing nothing, when a layer is a ring (a sliding window's slots are
    /// not positions) or the range is not inside the cache.
    pub fn shift(&mut self, from: usize, count: usize, rotate: &dyn Fn(usize, &mut [f32])) -> bool {
        let len = self.len;
        if count == 0
            || from + count > len
            || self.rings.iter().any(|r| r.is_some())
            || self.layer_len.iter().any(|&l| l != len)
        {
            return count == 0;
        }
        let (d, block) = (self.head_dim, self.block);
        let nb = d / block;
        let mut key = vec![0.0f32; d];
        let mut codes = vec![0i8; d];
        for (layer, heads) in self.layers.iter_mut().enumerate() {
            for hc in heads.iter_mut() {
                for src in from + count..len {
                    let dst = src - count;
                    let at = |t: usize, i: usize| (t / TILE * d + i) * TILE + t % TILE;
                    match hc {
                        HeadCache::F32 { k, v } => {
                            (0..d).for_each(|i| key[i] = k[at(src, i)]);
                            rotate(layer, &mut key);
                            (0..d).for_each(|i| k[at(dst, i)] = key[i]);
                            v.copy_within(src * d..(src + 1) * d, dst * d);
                        }
                        HeadCache::F16 { k, v } => {
                            (0..d).for_each(|i| key[i] = k[at(src, i)].to_f32());
                            rotate(layer, &mut key);
                            (0..d).for_each(|i| k[at(dst, i)] = f16::from_f32(key[i]));
                            v.copy_within(src * d..(src + 1) * d, dst * d);
                        }
                        HeadCache::Q8 { k, ks, v, vs } => {
                            for b in 0..nb {
                                let s = ks[scale_at(nb, src, b)].to_f32();
                                for i in b * block..(b + 1) * block {
                                    key[i] = k[key_at(d, src, i)] as f32 * s;
                                }
                            }
                            rotate(layer, &mut key);
                            for b in 0..nb {
                                let r = b * block..(b + 1) * block;
                                ks[scale_at(nb, dst, b)] =
                                    quantize_q8(&key[r.clone()], &mut codes[r.clone()]);
                                vs[scale_at(nb, dst, b)] = vs[scale_at(nb, src, b)];
                            }
                            for i in 0..d {
                                k[key_at(d, dst, i)] = codes[i];
                                v[value_at(d, dst, i)] = v[value_at(d, src, i)];
                            }
                        }
                        HeadCache::Q4 { k, ks, v, vs } => {
                            for b in 0..nb {
                                let s = ks[scale_at(nb, src, b)].to_f32();
                                for i in b * block..(b + 1) * block {
                                    key[i] = nibble(k, key_at(d, src, i)) as f32 * s;
                                }
                            }
                            rotate(layer, &mut key);
                            for b in 0..nb {
                                let r = b * block..(b + 1) * block;
                                ks[scale_at(nb, dst, b)] =
                                    quantize_q4(&key[r.clone()], &mut codes[r.clone()]);
                                vs[scale_at(nb, dst, b)] = vs[scale_at(nb, src, b)];
                            }
                            for i in 0..d {
                                set_nibble(k, key_at(d, dst, i), codes[i]);
                                let c = nibble(v, value_at(d, src, i));
                                set_nibble(v, value_at(d, dst, i), c);
                            }
                        }
                    }
                }
            }
        }
        // Every layer is complete (no ring); cut the moved tail off.
        self.truncate(len - count);
        true
    }

    /// `layer`'s cache (positions `0..n`, n = positions pushed to that layer).
    pub fn layer(&self, layer: usize) -> LayerKv<'_> {
        LayerKv {
            heads: &self.layers[layer],
            slots: self.rings[layer].map(|(slots, _)| slots),
            block: self.block,
        }
    }

    /// Forgets every position from `n` on (a conversation edited or rolled back) and returns
    /// the positions kept: `n`, or 0 when a ring has already overwritten keys that position
    /// `n` would attend (then the cache is cleared and the caller runs the tokens again).
    pub fn truncate(&mut self, n: usize) -> usize {
        if n >= self.len {
            return self.len;
        }
        let len = self.len;
        let keeps = |ring: &Option<(usize, usize)>| match *ring {
            None => true,
            Some((slots, w)) => len <= slots || n + 1 + slots >= len + w,
        };
        let n = if self.rings.iter().all(keeps) { n } else { 0 };
        for l in 0..self.layers.len() {
            // A ring that has wrapped keeps its slots; later pushes overwrite them in order.
            let kept = match self.rings[l] {
                Some((slots, _)) if len > slots && n > 0 => continue,
                _ => n,
            };
            let lens = self.lens(kept);
            self.layers[l].iter_mut().for_each(|hc| hc.keep(lens));
        }
        self.layer_len.iter_mut().for_each(|l| *l = n);
        self.len = n;
        n
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// The elements the first `n` positions take in each of a head's vectors: keys in whole
    /// tiles, values (int8 and 4-bit: tiled like keys), and scales.
    fn lens(&self, n: usize) -> Lens {
        let (d, nb) = (self.head_dim, self.head_dim / self.block);
        let keys = n.div_ceil(TILE) * TILE * d;
        Lens {
            keys,
            values: n * d,
            scales: keys / d * nb,
        }
    }

    /// Whether every position below `len` is still where a prefix copy reads it: no ring has
    /// wrapped.
    fn unwrapped(&self) -> bool {
        self.rings
            .iter()
            .all(|r| r.is_none_or(|(slots, _)| self.len <= slots))
    }

    /// Keeps the first `n` positions exactly as they were pushed, and says whether it could:
    /// not when fewer are stored or a ring has wrapped (its slots then mix in later positions).
    /// What follows computes as it would after a run of just those `n` positions.
    pub fn keep_prefix(&mut self, n: usize) -> bool {
        if n > self.len || !self.unwrapped() {
            return false;
        }
        self.truncate(n) == n
    }

    /// A copy of every stored position (a ring's slots as they are) with room for `capacity`
    /// positions in all: what runs next in the copy computes as it would here. Decisions fork
    /// a prompt's cache once per question and per option.
    pub fn fork(&self, capacity: usize) -> KvCache {
        let mut c = self.clone();
        c.capacity = capacity.max(self.len);
        c
    }

    /// A copy of the first `n` positions (a prompt cache's entry), in as little memory as they
    /// take; `None` when fewer are stored or a ring has wrapped.
    pub fn prefix(&self, n: usize) -> Option<KvCache> {
        if n > self.len || !self.unwrapped() {
            return None;
        }
        let mut c = KvCache {
            layers: Vec::with_capacity(self.layers.len()),
            rings: self.rings.clone(),
            layer_len: vec![n; self.layers.len()],
            len: n,
            ..*self
        };
        let lens = self.lens(n);
        for heads in &self.layers {
            c.layers.push(
                heads
                    .iter()
                    .map(|h| HeadCache::new(self.precision).extended(h, lens))
                    .collect(),
            );
        }
        Some(c)
    }

    /// Replaces this cache's positions with the first `n` of `src` (a cache of the same model
    /// and settings) and returns whether it did: the same bytes a run of those tokens pushed,
    /// so what follows computes as if this cache had run them. The vectors keep their memory.
    pub fn assign_prefix(&mut self, src: &KvCache, n: usize) -> bool {
        let same = self.head_dim == src.head_dim
            && self.block == src.block
            && self.precision == src.precision
            && self.rings == src.rings
            && self.layers.len() == src.layers.len()
            && self
                .layers
                .iter()
                .zip(&src.layers)
                .all(|(a, b)| a.len() == b.len());
        if !same || n > src.len || n > self.capacity || !src.unwrapped() {
            return false;
        }
        let lens = self.lens(n);
        for (heads, from) in self.layers.iter_mut().zip(&src.layers) {
            for (h, f) in heads.iter_mut().zip(from) {
                h.keep(Lens::NONE);
                h.extend(f, lens);
            }
        }
        self.layer_len.iter_mut().for_each(|l| *l = n);
        self.len = n;
        true
    }
}

#[cfg(test)]
mod tests;
