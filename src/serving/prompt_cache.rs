//! Prompts' KV caches kept beyond their slots, within a memory budget.
//!
//! Slot affinity finds a prefix only in a *free* slot, and under load a request usually meets
//! one free slot: the one an unrelated answer just left. So the keys and values of each prompt
//! the engine runs are also copied here, and a request whose prompt starts with a kept one (the
//! same system prompt and question from another client, a conversation resent after its slot
//! was taken) copies them into its slot instead of running those tokens again. A copy is the
//! bytes the earlier run pushed, and a prompt's keys and values do not depend on how its
//! tokens were split into chunks, so the answer is the one a fresh run gives (the serving
//! tests hold answers to the single stream's). Least recently used entries leave first; an
//! entry that a newer one extends is dropped, as the newer one serves its requests too.

use crate::kv_cache::KvCache;

pub(super) struct PromptCache {
    entries: Vec<Entry>,
    budget: usize,
    bytes: usize,
    clock: u64,
}

struct Entry {
    /// The adapter set the prompt ran with ([`AdapterSet::key`](crate::lora::AdapterSet::key);
    /// empty: the base): keys and values of other adapters are other numbers.
    adapters: String,
    tokens: Vec<u32>,
    kv: KvCache,
    bytes: usize,
    used: u64,
}

/// A kept prompt that a new one can start from.
pub(super) struct Found {
    index: usize,
    /// Positions the new prompt shares with it.
    pub(super) len: usize,
}

impl PromptCache {
    /// A cache of at most `budget` bytes of keys and values (0: none kept).
    pub(super) fn new(budget: usize) -> PromptCache {
        PromptCache {
            entries: Vec::new(),
            budget,
            bytes: 0,
            clock: 0,
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry sharing the longest prefix with `prompt`, counted up to `at_most` positions.
    pub(super) fn find(&self, prompt: &[u32], at_most: usize, adapters: &str) -> Option<Found> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.adapters == adapters)
            .map(|(index, e)| Found {
                index,
                len: crate::generate::common_prefix(&e.tokens, prompt).min(at_most),
            })
            .filter(|f| f.len > 0)
            .max_by_key(|f| f.len)
    }

    /// Copies the found prefix into `into`; false when the copy could not be made (then
    /// `into` is unchanged).
    pub(super) fn restore(&mut self, found: &Found, into: &mut KvCache) -> bool {
        self.clock += 1;
        let e = &mut self.entries[found.index];
        e.used = self.clock;
        into.assign_prefix(&e.kv, found.len)
    }

    /// Keeps the first `tokens.len()` positions of `kv` (which ran `tokens`), unless a kept
    /// entry already holds them or they exceed the budget; drops entries it extends, then the
    /// least recently used until it fits.
    pub(super) fn insert(&mut self, tokens: &[u32], kv: &KvCache, adapters: &str) {
        if self.budget == 0
            || tokens.is_empty()
            || self
                .entries
                .iter()
                .any(|e| e.adapters == adapters && e.tokens.starts_with(tokens))
        {
            return;
        }
        let Some(copy) = kv.prefix(tokens.len()) else {
            return;
        };
        let bytes = copy.bytes() + 4 * tokens.len();
        if bytes > self.budget {
            return;
        }
        let mut freed = 0;
        self.entries.retain(|e| {
            let keep = e.adapters != adapters || !tokens.starts_with(&e.tokens);
            if !keep {
                freed += e.bytes;
            }
            keep
        });
        self.bytes -= freed;
        while self.bytes + bytes > self.budget {
            let (i, _) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .expect("entries hold the bytes counted");
            self.bytes -= self.entries.swap_remove(i).bytes;
        }
        self.clock += 1;
        self.bytes += bytes;
        self.entries.push(Entry {
            adapters: adapters.to_string(),
            tokens: tokens.to_vec(),
            kv: copy,
            bytes,
            used: self.clock,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KvPrecision;

    fn filled(tokens: &[u32], precision: KvPrecision) -> KvCache {
        let (layers, heads, d) = (2, 2, 32);
        let mut c = KvCache::new(layers, heads, d, 256, precision);
        for &t in tokens {
            for l in 0..layers {
                let k: Vec<f32> = (0..heads * d)
                    .map(|i| (t as f32 * 0.37 + i as f32 * 0.11 + l as f32).sin())
                    .collect();
                let v: Vec<f32> = k.iter().map(|x| x * 0.5 - 0.1).collect();
                c.push(l, &k, &v);
            }
        }
        c
    }

    /// A restored prefix is the cache that ran those tokens cut back to them (what slot reuse
    /// already runs on), element for element, in every precision and at tile edges, and the
    /// next push lands on both alike.
    #[test]
    fn a_restored_prefix_equals_the_cache_cut_back() {
        for precision in [
            KvPrecision::F16,
            KvPrecision::F32,
            KvPrecision::Q8,
            KvPrecision::Q4,
        ] {
            let tokens: Vec<u32> = (0..40).map(|i| i * 7 % 13).collect();
            let full = filled(&tokens, precision);
            for n in [1, 15, 16, 17, 33, 40] {
                let mut want = full.clone();
                assert_eq!(want.truncate(n), n);
                let mut got = filled(&[5, 6, 7], precision); // old contents are replaced
                assert!(got.assign_prefix(&full, n));
                let mut snap = full.prefix(n).unwrap();
                assert!(got == want && snap == want, "{precision:?} n={n}");
                for c in [&mut got, &mut snap, &mut want] {
                    for l in 0..2 {
                        c.push(l, &[0.25; 64], &[-0.5; 64]);
                    }
                }
                assert!(got == want && snap == want, "{precision:?} n={n} + 1");
                assert_eq!(got.len(), n + 1);
            }
            assert!(full.prefix(41).is_none());
        }
    }

    #[test]
    fn entries_are_found_by_prefix_extended_and_evicted_within_the_budget() {
        let p = KvPrecision::F16;
        let a: Vec<u32> = (0..20).collect();
        let one = filled(&a, p).prefix(20).unwrap().bytes() + 80;
        let mut pc = PromptCache::new(2 * one + 10);
        pc.insert(&a[..10], &filled(&a, p), "");
        pc.insert(&a, &filled(&a, p), ""); // extends the first: it replaces it
        assert_eq!(pc.len(), 1);
        pc.insert(&a[..12], &filled(&a, p), ""); // already held
        assert_eq!(pc.len(), 1);
        let mut q = a.clone();
        q.extend([99, 98]);
        let f = pc.find(&q, q.len() - 1, "").unwrap();
        assert!(pc.find(&q, q.len() - 1, "adapter@3f800000").is_none());
        assert_eq!(f.len, 20);
        assert_eq!(pc.find(&[7, 7], 1, "").map(|f| f.len), None);
        let b: Vec<u32> = (100..120).collect();
        let c: Vec<u32> = (200..220).collect();
        pc.insert(&b, &filled(&b, p), "");
        let mut into = filled(&[1], p);
        let f = pc.find(&a, 19, "").unwrap();
        assert!(pc.restore(&f, &mut into)); // a is now the most recent
        pc.insert(&c, &filled(&c, p), ""); // over budget: b, the least recent, leaves
        assert_eq!(pc.len(), 2);
        assert!(pc.bytes() <= 2 * one + 10);
        assert!(pc.find(&b, 19, "").is_none() && pc.find(&c, 19, "").is_some());
        assert_eq!(into.len(), 19);
        // No budget, nothing kept.
        let mut none = PromptCache::new(0);
        none.insert(&a, &filled(&a, p), "");
        assert_eq!((none.len(), none.bytes()), (0, 0));
    }
}
