//! Long contexts on the tiny fixture with its position limit raised to 40,960 (its RoPE has no
//! length-dependent scaling, so the weights are valid at any position): a 32K-position
//! sequence end to end, and the int8 cache's logits at position 30K against the f32 cache's.

use crate::common;
use pocket::config::KvPrecision;
use pocket::model::Logits;

/// qwen3-tiny with `max_position_embeddings` 40,960, in a temporary directory.
fn long_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = common::tiny("qwen3-tiny");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let cfg = dir.path().join("config.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    c["max_position_embeddings"] = 40960.into();
    std::fs::write(&cfg, c.to_string()).unwrap();
    dir
}

/// Deterministic ids below the fixture's vocabulary.
fn ids(n: usize) -> Vec<u32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 380) as u32 + 3
        })
        .collect()
}

fn softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let e: Vec<f64> = x.iter().map(|&v| (v as f64 - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

fn kl(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .filter(|(a, _)| **a > 0.0)
        .map(|(a, b)| a * (a / b).ln())
        .sum()
}

/// 32,768 positions run end to end in the f32 and the int8 cache, prefilled in chunks as
/// `generate` does and then decoded past; the cache holds what `Model::kv_bytes` computed
/// (int8: 34 bytes per 32 dimensions against f16's 64). At position 30,000, where the
/// quantization error of attention has grown the most, the int8 cache's next-token
/// distribution is within KL 1e-3 of the f32 cache's, its logits within 5 % of their spread,
/// and its argmax the same.
#[test]
fn a_32k_sequence_runs_end_to_end_and_q8_logits_at_30k_stay_near_f32() {
    let dir = long_fixture();
    let tokens = ids(32_768);
    let mut at_30k = Vec::new();
    for kv in [KvPrecision::F32, KvPrecision::Q8] {
        let mut config = common::config();
        config.kv = kv;
        let m = common::open_with(dir.path(), config).unwrap();
        let mut state = m.model.new_state(32_768 + 4);
        let (head, tail) = tokens.split_at(30_000);
        let mut logits = Vec::new();
        for (i, c) in head.chunks(4096).enumerate() {
            let last = (i + 1) * 4096 >= head.len();
            let want = if last { Logits::Last } else { Logits::None };
            logits = m.model.forward_batch(&mut state, c, want).unwrap();
        }
        at_30k.push(logits);
        m.model
            .forward_batch(&mut state, tail, Logits::None)
            .unwrap();
        for &t in &tokens[..4] {
            let logits = m.model.step(&mut state, t, true).unwrap().expect("logits");
            assert!(logits.iter().all(|x| x.is_finite()), "{kv:?}");
        }
        assert_eq!(state.cache.len(), 32_772);
        assert_eq!(state.cache.bytes(), m.model.kv_bytes(32_772, kv));
        if kv == KvPrecision::Q8 {
            let f16 = m.model.kv_bytes(32_772, KvPrecision::F16) as f64;
            assert!((state.cache.bytes() as f64 / f16 - 34.0 / 64.0).abs() < 1e-3);
        }
    }
    let (exact, q8) = (&at_30k[0], &at_30k[1]);
    let kl8 = kl(&softmax(exact), &softmax(q8));
    let max_diff = q8
        .iter()
        .zip(exact)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    let spread = {
        let mean = exact.iter().sum::<f32>() / exact.len() as f32;
        (exact.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / exact.len() as f32).sqrt()
    };
    eprintln!("at 30K: q8 KL {kl8:.2e}, max |Δlogit| {max_diff:.4} (logit sd {spread:.3})");
    assert!(kl8 <= 1e-3, "KL {kl8}");
    assert!(max_diff <= 0.05 * spread.max(1.0), "{max_diff}");
    assert_eq!(pocket::sampler::argmax(q8), pocket::sampler::argmax(exact));
}

/// The 4-bit cache (a measurement, scalar attention) holds what `Model::kv_bytes` computed,
/// 18 bytes per 32 dimensions against f16's 64, and its logits after 2,000 positions are
/// finite, near the f32 cache's but further from them than the int8 cache's.
#[test]
fn the_4bit_cache_holds_its_computed_bytes_and_errs_more_than_int8() {
    let dir = long_fixture();
    let tokens = ids(2_000);
    let mut last = Vec::new();
    for kv in [KvPrecision::F32, KvPrecision::Q8, KvPrecision::Q4] {
        let mut config = common::config();
        config.kv = kv;
        let m = common::open_with(dir.path(), config).unwrap();
        let mut state = m.model.new_state(2_000);
        let logits = m
            .model
            .forward_batch(&mut state, &tokens, Logits::Last)
            .unwrap();
        assert!(logits.iter().all(|x| x.is_finite()), "{kv:?}");
        assert_eq!(state.cache.bytes(), m.model.kv_bytes(2_000, kv));
        if kv == KvPrecision::Q4 {
            let f16 = m.model.kv_bytes(2_000, KvPrecision::F16) as f64;
            assert!((state.cache.bytes() as f64 / f16 - 18.0 / 64.0).abs() < 1e-3);
        }
        last.push(logits);
    }
    let exact = softmax(&last[0]);
    let (kl8, kl4) = (
        kl(&exact, &softmax(&last[1])),
        kl(&exact, &softmax(&last[2])),
    );
    eprintln!("at 2K: q8 KL {kl8:.2e}, q4 KL {kl4:.2e}");
    assert!(kl4 > kl8 && kl4 < 0.5, "q4 KL {kl4}, q8 {kl8}");
}
