//! The sampler on a whole vocabulary (49,152 ids, SmolLM2's): what one sampled token costs
//! between two decode steps, per filter setting. Logits are synthetic but shaped like a chat
//! model's: a broad normal body and a few dozen strong candidates.
//!
//! `cargo bench --bench sampler`

use criterion::{criterion_group, criterion_main, Criterion};
use pocket::sampler::{Sampler, SamplerConfig};

fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            // Box-Muller: a normal body around -2 with spread 2.5 ...
            let (u, v) = (uniform(), uniform());
            let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            let mut l = -2.0 + 2.5 * z;
            // ... and a few dozen ids far above it.
            if i % 1500 == 7 {
                l += 8.0 + 6.0 * uniform();
            }
            l as f32
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let vocab = 49_152;
    let rows: Vec<Vec<f32>> = (0..8).map(|k| logits(vocab, k + 1)).collect();
    let base = SamplerConfig {
        temperature: 0.7,
        seed: 1,
        ..SamplerConfig::default()
    };
    let settings = [
        (
            "top_p_0.95",
            SamplerConfig {
                top_p: 0.95,
                ..base.clone()
            },
        ),
        ("plain_t0.7", base.clone()),
        (
            "plain_t1.5",
            SamplerConfig {
                temperature: 1.5,
                ..base.clone()
            },
        ),
        (
            "top_k_40",
            SamplerConfig {
                top_k: 40,
                ..base.clone()
            },
        ),
        (
            "min_p_0.05",
            SamplerConfig {
                min_p: 0.05,
                ..base.clone()
            },
        ),
    ];
    let mut g = c.benchmark_group("sample_49152");
    for (name, cfg) in settings {
        let mut s = Sampler::new(cfg);
        let mut k = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                k = (k + 1) % rows.len();
                s.sample(&rows[k])
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
