//! One KV head's storage in each element type, and copying a prefix of positions between
//! heads (what reusing a cached prompt and forking a state do).

use half::f16;

use super::KvPrecision;

#[derive(Clone)]
#[cfg_attr(test, derive(PartialEq))]
pub(super) enum HeadCache {
    F32 {
        k: Vec<f32>,
        v: Vec<f32>,
    },
    F16 {
        k: Vec<f16>,
        v: Vec<f16>,
    },
    Q8 {
        k: Vec<i8>,
        ks: Vec<f16>,
        v: Vec<i8>,
        vs: Vec<f16>,
    },
    /// Two codes per byte, nibble index as the int8 layout's byte index.
    Q4 {
        k: Vec<u8>,
        ks: Vec<f16>,
        v: Vec<u8>,
        vs: Vec<f16>,
    },
}

/// Element counts of a prefix of positions in a head's vectors ([`KvCache::lens`]).
#[derive(Clone, Copy)]
pub(super) struct Lens {
    pub(super) keys: usize,
    pub(super) values: usize,
    pub(super) scales: usize,
}

impl Lens {
    pub(super) const NONE: Lens = Lens {
        keys: 0,
        values: 0,
        scales: 0,
    };
}

impl HeadCache {
    /// An empty head of `precision`.
    pub(super) fn new(precision: KvPrecision) -> HeadCache {
        match precision {
            KvPrecision::F32 => HeadCache::F32 {
                k: Vec::new(),
                v: Vec::new(),
            },
            KvPrecision::F16 => HeadCache::F16 {
                k: Vec::new(),
                v: Vec::new(),
            },
            KvPrecision::Q8 => HeadCache::Q8 {
                k: Vec::new(),
                ks: Vec::new(),
                v: Vec::new(),
                vs: Vec::new(),
            },
            KvPrecision::Q4 => HeadCache::Q4 {
                k: Vec::new(),
                ks: Vec::new(),
                v: Vec::new(),
                vs: Vec::new(),
            },
        }
    }

    /// Keeps the first `l` elements' worth of positions.
    pub(super) fn keep(&mut self, l: Lens) {
        match self {
            HeadCache::F32 { k, v } => {
                k.truncate(l.keys);
                v.truncate(l.values);
            }
            HeadCache::F16 { k, v } => {
                k.truncate(l.keys);
                v.truncate(l.values);
            }
            HeadCache::Q8 { k, ks, v, vs } => {
                // Values are tiled like keys.
                k.truncate(l.keys);
                v.truncate(l.keys);
                ks.truncate(l.scales);
                vs.truncate(l.scales);
            }
            HeadCache::Q4 { k, ks, v, vs } => {
                k.truncate(l.keys / 2);
                v.truncate(l.keys / 2);
                ks.truncate(l.scales);
                vs.truncate(l.scales);
            }
        }
    }

    /// Appends `src`'s first `l` elements' worth (this head empty, `src` of the same kind).
    pub(super) fn extend(&mut self, src: &HeadCache, l: Lens) {
        fn put<T: Copy>(to: &mut Vec<T>, from: &[T], n: usize) {
            to.extend_from_slice(&from[..n.min(from.len())]);
        }
        match (self, src) {
            (HeadCache::F32 { k, v }, HeadCache::F32 { k: sk, v: sv }) => {
                put(k, sk, l.keys);
                put(v, sv, l.values);
            }
            (HeadCache::F16 { k, v }, HeadCache::F16 { k: sk, v: sv }) => {
                put(k, sk, l.keys);
                put(v, sv, l.values);
            }
            (
                HeadCache::Q8 { k, ks, v, vs },
                HeadCache::Q8 {
                    k: sk,
                    ks: sks,
                    v: sv,
                    vs: svs,
                },
            ) => {
                put(k, sk, l.keys);
                put(v, sv, l.keys);
                put(ks, sks, l.scales);
                put(vs, svs, l.scales);
            }
            (
                HeadCache::Q4 { k, ks, v, vs },
                HeadCache::Q4 {
                    k: sk,
                    ks: sks,
                    v: sv,
                    vs: svs,
                },
            ) => {
                put(k, sk, l.keys / 2);
                put(v, sv, l.keys / 2);
                put(ks, sks, l.scales);
                put(vs, svs, l.scales);
            }
            _ => unreachable!("caches of one model share their precision"),
        }
    }

    pub(super) fn extended(mut self, src: &HeadCache, l: Lens) -> HeadCache {
        self.extend(src, l);
        self
    }
}
