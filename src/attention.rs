//! Causal self-attention of one token over the KV cache, grouped for GQA: the query heads that
//! share a KV head are scored together, so each cached key and value is read once per step
//! for the whole group. The arithmetic is the online-softmax kernel of `kernels::attn`, which
//! keeps memory bounded at any context length.

use crate::kernels::attn::{self, Running, TILE};
use crate::kernels::Cpu;
use crate::kv_cache::LayerKv;
use pocket_formats::hf::ModelSpec;

/// Positions per task when one step's attention is split across the worker pool.
const MIN_SPAN: usize = 256;
/// Shorter contexts attend on the calling thread (the pool's wake-up would cost more).
const MIN_PARALLEL: usize = 64;

/// How one row's attention over a long context is split into spans of positions. Decoding
/// splits a long context so both cores share it; the spans' running states are merged in a
/// fixed order, which rounds differently from one pass over the whole span. Speculative
/// verification runs several rows, one per task, yet each must equal what decoding computes, so
/// it takes decoding's spans on its own thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Decoding (one row): decoding's spans, run on the worker pool.
    Pool,
    /// Decoding's spans, folded and merged on the calling thread in the same order: the same
    /// bits as [`Split::Pool`] (verifying speculated tokens).
    Inline,
    /// One span (prefill and perplexity: rows already run one per task).
    Whole,
}

/// Query heads `q` (one head after another) over the first `n` cached positions of `kv` (with
/// a `window`, only the last `window` of them), written to `out`, split as `split` says. A
/// ring cache (a sliding-window layer) holds position `p` in slot `p % slots`: a span of
/// positions is one or two spans of slots.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    cpu: Cpu,
    s: &ModelSpec,
    q: &[f32],
    kv: &LayerKv,
    n: usize,
    window: Option<usize>,
    out: &mut [f32],
    split: Split,
) {
    let (d, g, kvh) = (s.head_dim, s.group_size(), s.num_kv_heads);
    let scale = s.attn_scale();
    let start = window.map_or(0, |w| n.saturating_sub(w));
    let len = n - start;
    let qs: Vec<f32> = q.iter().map(|x| x * scale).collect();
    let group_q = |h: usize| &qs[h * g * d..(h + 1) * g * d];
    let pool = crate::pool::global();
    let threads = pool.threads();
    if split == Split::Whole
        || threads == 1
        || len < MIN_PARALLEL
        || (kvh == 1 && len < 2 * MIN_SPAN)
    {
        for h in 0..kvh {
            let mut run = Running::new(g, d);
            fold(cpu, group_q(h), d, kv, h, start, n, &mut run);
            run.finish(&mut out[h * g * d..(h + 1) * g * d]);
        }
        return;
    }
    // Spans per KV head: about two tasks per thread, none shorter than MIN_SPAN.
    let splits = (2 * threads).div_ceil(kvh).min(len / MIN_SPAN).max(1);
    // Span boundaries on tile edges (but the first, at `start`).
    let base = start / TILE * TILE;
    let tiles = (n - base).div_ceil(TILE);
    let bound = |i: usize| (base + tiles * i / splits * TILE).clamp(start, n);
    let span = |task: usize| {
        let (h, i) = (task / splits, task % splits);
        let mut run = Running::new(g, d);
        fold(cpu, group_q(h), d, kv, h, bound(i), bound(i + 1), &mut run);
        run
    };
    let parts: Vec<Running> = if split == Split::Inline {
        (0..kvh * splits).map(span).collect()
    } else {
        let parts: Vec<std::sync::Mutex<Option<Running>>> = (0..kvh * splits)
            .map(|_| std::sync::Mutex::new(None))
            .collect();
        pool.run(parts.len(), &|task| {
            *parts[task].lock().unwrap_or_else(|e| e.into_inner()) = Some(span(task));
        });
        parts
            .into_iter()
            .map(|p| {
                p.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("the pool ran every span")
            })
            .collect()
    };
    for h in 0..kvh {
        let mut run = parts[h * splits].clone();
        for p in &parts[h * splits + 1..(h + 1) * splits] {
            run.merge(p);
        }
        run.finish(&mut out[h * g * d..(h + 1) * g * d]);
    }
}

/// Positions `p0..p1` of KV head `h` folded into `run`, through the ring's slots if it has one
/// (its length is a whole number of tiles, so a position keeps its place in a tile).
#[allow(clippy::too_many_arguments)]
fn fold(
    cpu: Cpu,
    q: &[f32],
    d: usize,
    kv: &LayerKv,
    h: usize,
    p0: usize,
    p1: usize,
    run: &mut Running,
) {
    match kv.ring() {
        None => attn::span(cpu, q, d, kv.head(h), p0, p1, run),
        Some(slots) => {
            // A window never exceeds its ring (`ring_slots`); anything longer would read
            // overwritten slots.
            assert!(
                p1 - p0 <= slots,
                "{} positions over a ring of {slots}",
                p1 - p0
            );
            let s0 = p0 % slots;
            let e = s0 + (p1 - p0);
            attn::span(cpu, q, d, kv.head(h), s0, e.min(slots), run);
            if e > slots {
                attn::span(cpu, q, d, kv.head(h), 0, e - slots, run);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;
    use crate::kv_cache::{KvCache, KvPrecision};

    /// Split across the pool or not, with a sliding window or not, every head equals a plain
    /// two-pass softmax over its KV head's positions (f32 cache). Head size 16 takes the AVX2
    /// kernel, 32 the AVX-512 one; windows start inside tiles and on their edges.
    #[test]
    fn grouped_and_split_equal_per_head_softmax() {
        let mut rng = Rng(9);
        for d in [16, 32] {
            let config = serde_json::json!({
                "model_type": "llama", "hidden_size": 96, "intermediate_size": 128,
                "num_hidden_layers": 1, "num_attention_heads": 6, "num_key_value_heads": 2,
                "head_dim": d, "vocab_size": 10, "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-6
            });
            let spec = ModelSpec::from_json(std::path::Path::new("config.json"), &config).unwrap();
            let scale = 1.0 / (d as f32).sqrt();
            for n in [1, 37, 1000] {
                let mut cache = KvCache::new(1, 2, d, n, KvPrecision::F32);
                let keys = rng.vec(n * 2 * d, 1.0);
                let values = rng.vec(n * 2 * d, 1.0);
                for t in 0..n {
                    cache.push(
                        0,
                        &keys[t * 2 * d..(t + 1) * 2 * d],
                        &values[t * 2 * d..(t + 1) * 2 * d],
                    );
                }
                let q = rng.vec(6 * d, 1.0);
                for window in [None, Some(1), Some(7), Some(32), Some(600)] {
                    let start = window.map_or(0, |w| n.saturating_sub(w));
                    // The same positions in a ring cache (a sliding-window layer's), wrapped
                    // several times over by n = 1000.
                    let ring = window.map(|w| {
                        let mut c =
                            KvCache::new(1, 2, d, n, KvPrecision::F32).with_windows(&[Some(w)]);
                        for t in 0..n {
                            let r = t * 2 * d..(t + 1) * 2 * d;
                            c.push(0, &keys[r.clone()], &values[r]);
                        }
                        c
                    });
                    let cases = [Split::Whole, Split::Pool, Split::Inline]
                        .into_iter()
                        .flat_map(|p| {
                            [(p, &cache)]
                                .into_iter()
                                .chain(ring.iter().map(move |r| (p, r)))
                        });
                    let cpus = crate::kernels::Cpu::each();
                    for ((split, cache), cpu) in
                        cases.flat_map(|c| cpus.iter().map(move |&cpu| (c, cpu)))
                    {
                        let mut got = vec![0.0; 6 * d];
                        attend(cpu, &spec, &q, &cache.layer(0), n, window, &mut got, split);
                        for h in 0..6 {
                            let kv = h / 3;
                            let dot = |t: usize| -> f32 {
                                (0..d)
                                    .map(|i| q[h * d + i] * keys[t * 2 * d + kv * d + i])
                                    .sum::<f32>()
                                    * scale
                            };
                            let sc: Vec<f32> = (start..n).map(dot).collect();
                            let m = sc.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                            let e: Vec<f32> = sc.iter().map(|x| (x - m).exp()).collect();
                            let l: f32 = e.iter().sum();
                            for i in 0..d {
                                let o: f32 = (start..n)
                                    .map(|t| e[t - start] * values[t * 2 * d + kv * d + i])
                                    .sum::<f32>()
                                    / l;
                                let g = got[h * d + i];
                                assert!(
                                    (g - o).abs() <= 1e-5,
                                    "d={d} n={n} window={window:?} {split:?}: {g} vs {o}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Verification's inline spans are decoding's pooled spans, bit for bit, at lengths that
    /// split (and windows that start inside a tile).
    #[test]
    fn inline_spans_equal_pooled_spans_bit_for_bit() {
        let mut rng = Rng(4);
        let d = 32;
        let config = serde_json::json!({
            "model_type": "llama", "hidden_size": 96, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 6, "num_key_value_heads": 2,
            "head_dim": d, "vocab_size": 10, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6
        });
        let spec = ModelSpec::from_json(std::path::Path::new("config.json"), &config).unwrap();
        for n in [300, 777, 2049] {
            let mut cache = KvCache::new(1, 2, d, n, KvPrecision::F16);
            for _ in 0..n {
                cache.push(0, &rng.vec(2 * d, 1.0), &rng.vec(2 * d, 1.0));
            }
            let q = rng.vec(6 * d, 1.0);
            for window in [None, Some(517)] {
                for cpu in crate::kernels::Cpu::each() {
                    let run = |split| {
                        let mut out = vec![0.0f32; 6 * d];
                        attend(cpu, &spec, &q, &cache.layer(0), n, window, &mut out, split);
                        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                    };
                    assert_eq!(
                        run(Split::Pool),
                        run(Split::Inline),
                        "n={n} {window:?} {cpu:?}"
                    );
                }
            }
        }
    }
}
