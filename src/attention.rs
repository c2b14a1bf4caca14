//! Causal self-attention of one token over the KV cache, grouped for GQA: the query heads that
//! share a KV head are scored together, so each cached key and value row is read once per
//! step for its whole group rather than once per query head. Each head's arithmetic (dot
//! products, softmax, weighted sum in position order) is the reference definition unchanged.

use crate::kernels::dot::dot;
use crate::ops::softmax;
use pocket_formats::hf::ModelSpec;

/// Query heads `q` (one head after another) over the first `n` cached positions of `keys` and
/// `values` (`[position][kv_head][head_dim]`), written to `out`. With `parallel` (decode: one
/// token at a time), long contexts give each KV head's group its own task on the worker pool;
/// batched prefill already runs one token per task and passes false.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    s: &ModelSpec,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    n: usize,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
    parallel: bool,
) {
    let (d, g) = (s.head_dim, s.group_size());
    let group = |kv: usize, o: &mut [f32], scores: &mut Vec<f32>| {
        attend_group(
            s,
            kv,
            &q[kv * g * d..(kv + 1) * g * d],
            keys,
            values,
            n,
            o,
            scores,
        )
    };
    let pool = crate::kernels::pool::global();
    if parallel && n * s.num_heads * d >= 1 << 16 && s.num_kv_heads > 1 && pool.threads() > 1 {
        let outs: Vec<std::sync::Mutex<&mut [f32]>> =
            out.chunks_mut(g * d).map(std::sync::Mutex::new).collect();
        pool.run(outs.len(), &|kv| {
            let mut o = outs[kv].lock().unwrap_or_else(|e| e.into_inner());
            group(kv, &mut o, &mut Vec::new());
        });
    } else {
        for (kv, o) in out.chunks_mut(g * d).enumerate() {
            group(kv, o, scratch);
        }
    }
}

/// The query heads `qs` of KV head `kv` (group × head_dim) into `out`.
#[allow(clippy::too_many_arguments)]
fn attend_group(
    s: &ModelSpec,
    kv: usize,
    qs: &[f32],
    keys: &[f32],
    values: &[f32],
    n: usize,
    out: &mut [f32],
    scores: &mut Vec<f32>,
) {
    let (d, g, kv_row) = (s.head_dim, s.group_size(), s.num_kv_heads * s.head_dim);
    let scale = 1.0 / (d as f32).sqrt();
    scores.resize(g * n, 0.0);
    for t in 0..n {
        let k = &keys[t * kv_row + kv * d..][..d];
        for h in 0..g {
            scores[h * n + t] = dot(&qs[h * d..(h + 1) * d], k) * scale;
        }
    }
    for h in 0..g {
        softmax(&mut scores[h * n..(h + 1) * n]);
    }
    out.fill(0.0);
    for t in 0..n {
        let v = &values[t * kv_row + kv * d..][..d];
        for h in 0..g {
            let p = scores[h * n + t];
            for (o, &x) in out[h * d..(h + 1) * d].iter_mut().zip(v) {
                *o += p * x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::Rng;

    /// The grouped loop gives exactly what attending head by head gives (same dot kernel).
    #[test]
    fn grouped_equals_per_head() {
        let config = serde_json::json!({
            "model_type": "llama", "hidden_size": 96, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 6, "num_key_value_heads": 2,
            "vocab_size": 10, "max_position_embeddings": 64, "rms_norm_eps": 1e-6
        });
        let spec = ModelSpec::from_json(std::path::Path::new("config.json"), &config).unwrap();
        let (d, n) = (16, 37);
        let mut rng = Rng(9);
        let q = rng.vec(6 * d, 1.0);
        let keys = rng.vec(n * 2 * d, 1.0);
        let values = rng.vec(n * 2 * d, 1.0);
        let mut got = vec![0.0; 6 * d];
        attend(
            &spec,
            &q,
            &keys,
            &values,
            n,
            &mut got,
            &mut Vec::new(),
            true,
        );
        for h in 0..6 {
            let kv = h / 3;
            let mut sc: Vec<f32> = (0..n)
                .map(|t| dot(&q[h * d..(h + 1) * d], &keys[t * 2 * d + kv * d..][..d]) * 0.25)
                .collect();
            softmax(&mut sc);
            for i in 0..d {
                let mut o = 0.0f32;
                for t in 0..n {
                    o += sc[t] * values[t * 2 * d + kv * d + i];
                }
                assert_eq!(got[h * d + i], o);
            }
        }
    }
}
