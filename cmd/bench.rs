//! `pocket bench`: prompt-processing and generation speed, the way llama-bench measures them
//! (pp: one batch of P tokens from an empty context; tg: N single-token steps; tg at depth: N
//! steps after D tokens already in the cache), so the numbers compare with llama.cpp's.

#[path = "bench_speculation.rs"]
mod speculation;

use anyhow::{bail, Result};
use clap::Args;
use pocket::model::{Logits, Model};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
// `-h` is the options and the examples; `--help` adds how the figures are made.
#[command(after_help = "Examples:
  pocket bench model.pocket
  pocket bench model.gguf --pp 0 --depth 0 -n 64 --batch 16 --reps 9
  pocket bench model.pocket --pp 512 -n 128 --depth 4096 -t 2 --reps 5 --json
  pocket bench model.gguf --speculate lookup --prompts evals/data/speculative/copy.jsonl -n 256
  pocket bench model-q8.pocket --speculate draft --draft model-q4.pocket --prompts FILE")]
#[command(after_long_help = "\
Token ids are pseudo-random (fixed seed), as in llama-bench; each figure is the median of \
--reps runs with min and max. Decode steps compute the full logits every token. \
The JSON also carries load_s, ttft_s (start of loading to the first token of a 10-token \
prompt), peak_rss_bytes, threads, isa (the kernels chosen, e.g. avx512-vnni, avx512-amx or aarch64-i8mm), \
activations and kv. POCKET_ISA=scalar|avx2|avx512|amx (x86-64) or scalar|neon|dotprod|i8mm (aarch64) \
caps the kernels; --activations int8x2|int8|f32 (POCKET_ACT) selects two-digit int8 activations \
(the default), one digit (llama.cpp's precision, faster prefill) or the exact path (f32 \
activations and f32 KV cache); POCKET_KV=f32|f16 sets the KV \
cache alone; POCKET_POOL=rayon runs the mat-vec bands on rayon instead of pocket's spin-then-park \
pool (for comparison).

With --speculate lookup|draft and --prompts FILE, bench measures speculative decoding instead: \
for each prompt (a JSONL file of {\"prompt\": …} or {\"messages\": […]} lines, or plain text, \
one prompt per line), a greedy answer of up to -n tokens decoded plainly and speculatively, \
alternating, --reps times each; it reports both decode speeds (medians), their ratio, whether \
the token ids were identical, and what speculation proposed, kept and how many passes it took. \
peak_rss_bytes then includes the draft model and its cache.

With --batch B, each generation rep also decodes B sequences together (one row each per \
step, as `pocket serve` batches its requests), right after the single-sequence rep; the figure \
is all B sequences' tokens per second, and batch_ratio its median over tg's.

Examples:
  pocket bench model.pocket
  pocket bench model.gguf --pp 0 --depth 0 -n 64 --batch 16 --reps 9
  pocket bench model.pocket --pp 512 -n 128 --depth 4096 -t 2 --reps 5 --json
  pocket bench model.gguf --speculate lookup --prompts evals/data/speculative/copy.jsonl -n 256
  pocket bench model-q8.pocket --speculate draft --draft model-q4.pocket --prompts FILE")]
// Speculation is a measurement of its own: its flags are `--help` only.
#[command(mut_arg("speculate", |a| a.hide_short_help(true)))]
#[command(mut_arg("draft", |a| a.hide_short_help(true)))]
pub struct BenchArgs {
    /// Model: an HF checkpoint directory, a .pocket or a GGUF file
    pub model: PathBuf,
    /// Prompt tokens for the prompt-processing test (0: skip). A count, not a text: `-p` is
    /// a prompt text everywhere else in pocket, so bench has no `-p`
    #[arg(
        long = "pp",
        visible_alias = "prompt-tokens",
        value_name = "TOKENS",
        default_value_t = 512
    )]
    pub prompt: usize,
    /// Tokens to generate in the generation tests (0: skip)
    #[arg(short = 'n', long, default_value_t = 128)]
    pub gen: usize,
    /// Context already in the cache for the deep generation test (0: skip)
    #[arg(long, default_value_t = 4096)]
    pub depth: usize,
    /// Worker threads, at least 1 (default: one per physical core; more than the machine's
    /// CPUs is lowered to that count, with a note)
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Also decode B sequences together (the server's batched step, one row per sequence,
    /// each row's logits bit for bit its own step's), alternating with the single-sequence
    /// test rep by rep; reports the aggregate tok/s and its ratio to one sequence (0: skip)
    #[arg(long, value_name = "B", default_value_t = 0, hide_short_help = true)]
    pub batch: usize,
    /// Repetitions of each test
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
    /// Skip checking a .pocket's tensor checksums at load (load and first-token times then
    /// leave the check out)
    #[arg(long, hide_short_help = true)]
    pub no_verify: bool,
    #[command(flatten)]
    pub spec: crate::speculate_args::SpecArgs,
    /// Prompts for the --speculate test (JSONL or one prompt per line)
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Speculative decoding",
        hide_short_help = true
    )]
    pub prompts: Option<PathBuf>,
}

#[derive(Serialize)]
struct Figure {
    tokens: usize,
    tok_s_median: f64,
    tok_s_min: f64,
    tok_s_max: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    depth: Option<usize>,
}

impl Figure {
    fn of(tokens: usize, depth: Option<usize>, seconds: &[f64]) -> Figure {
        let mut rates: Vec<f64> = seconds.iter().map(|s| tokens as f64 / s).collect();
        rates.sort_by(f64::total_cmp);
        Figure {
            tokens,
            tok_s_median: median(&rates),
            tok_s_min: rates[0],
            tok_s_max: rates[rates.len() - 1],
            depth,
        }
    }
}

pub(crate) fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[derive(Serialize)]
struct Report {
    model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pp: Option<Figure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tg: Option<Figure>,
    /// `--batch B` sequences decoding together: tokens are all B sequences' steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    tg_batch: Option<Figure>,
    /// The batched aggregate's median tok/s over one sequence's (`tg`), same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tg_depth: Option<Figure>,
    /// The depth's prefill before `tg_depth` (chunks of 512, as a prompt runs): long-prompt
    /// prefill speed, one sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pp_depth: Option<Figure>,
    load_s: f64,
    /// From the start of loading to the first generated token of a 10-token prompt (cold:
    /// the first forward pass of the process).
    ttft_s: f64,
    peak_rss_bytes: u64,
    /// The KV cache's element type.
    kv: &'static str,
    /// The cache's bytes after the depth run (`depth + n` positions), as held in memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_bytes: Option<usize>,
    /// Bytes one decode step at depth reads: the weights a step touches and the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    step_bytes_at_depth: Option<usize>,
    threads: usize,
    isa: &'static str,
    activations: &'static str,
}

/// Tokens per forward pass when filling the depth (llama.cpp's default micro-batch): a long
/// prompt's activations stay bounded, as in `run`.
const DEPTH_CHUNK: usize = 512;

/// Most sequences `--batch` decodes together (the server's `--parallel` slots are as many).
const MAX_BATCH: usize = 64;

/// Prompt tokens of the time-to-first-token figure.
const TTFT_PROMPT: usize = 10;

/// Deterministic token ids below `vocab` (xorshift; never a hot special token by design).
fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    debug_assert!(vocab > 0);
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

/// Seconds for `n` single-token steps from the state's current position.
fn decode(model: &Model, state: &mut pocket::model::State, n: usize, seed: u64) -> Result<f64> {
    let ids = tokens(n, model.spec.vocab_size, seed);
    let start = Instant::now();
    for &t in &ids {
        model.step(state, t, true)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Seconds for `n` steps of `b` sequences decoding together from empty caches
/// ([`Model::step_each`], the server's decode step).
fn decode_batch(model: &Model, b: usize, n: usize, rep: usize) -> Result<f64> {
    let vocab = model.spec.vocab_size;
    let ids: Vec<Vec<u32>> = (0..b)
        .map(|i| tokens(n, vocab, 1000 + (rep * b + i) as u64))
        .collect();
    let mut states: Vec<pocket::model::State> = (0..b).map(|_| model.new_state(n)).collect();
    let start = Instant::now();
    for step in 0..n {
        let mut refs: Vec<&mut pocket::model::State> = states.iter_mut().collect();
        let toks: Vec<u32> = ids.iter().map(|v| v[step]).collect();
        std::hint::black_box(model.step_each(&mut refs, &toks)?);
    }
    Ok(start.elapsed().as_secs_f64())
}

pub fn main(args: BenchArgs) -> Result<ExitCode> {
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    if args.batch == 1 || args.batch > MAX_BATCH {
        bail!(
            "--batch must be 0 (skip) or 2 to {MAX_BATCH} sequences, not {}",
            args.batch
        );
    }
    crate::term::set_threads(args.threads)?;
    let start = Instant::now();
    let options = crate::settings::load_options(!args.no_verify)?;
    let (m, _) = crate::settings::open_model(&args.model, options)?;
    let load_s = start.elapsed().as_secs_f64();
    let model = &m.model;
    let ttft_s = {
        let ids = tokens(TTFT_PROMPT, model.spec.vocab_size, 9);
        let mut state = model.new_state(TTFT_PROMPT + 1);
        let logits = model.forward_batch(&mut state, &ids, Logits::Last)?;
        std::hint::black_box(pocket::sampler::argmax(&logits));
        start.elapsed().as_secs_f64()
    };
    if args.spec.on() || args.prompts.is_some() {
        return speculation::main(&args, &m, options, load_s, ttft_s);
    }
    let max_ctx = model.spec.max_position_embeddings;
    let need = args.prompt.max(args.depth + args.gen).max(args.gen);
    if need > max_ctx {
        bail!("-p/--depth/-n need {need} positions; the model has {max_ctx}");
    }
    crate::memory::fit_context(model, "-p/--depth/-n", Some(need), need, args.json)?;
    let vocab = model.spec.vocab_size;
    let say = |s: String| {
        if !args.json {
            eprintln!("{s}");
        }
    };

    let pp = if args.prompt > 0 {
        let ids = tokens(args.prompt, vocab, 1);
        let mut secs = Vec::new();
        for _ in 0..args.reps {
            let mut state = model.new_state(args.prompt);
            let t = Instant::now();
            model.forward_batch(&mut state, &ids, Logits::Last)?;
            secs.push(t.elapsed().as_secs_f64());
        }
        let f = Figure::of(args.prompt, None, &secs);
        say(format!("pp{}: {:.1} tok/s", args.prompt, f.tok_s_median));
        Some(f)
    } else {
        None
    };

    let batch = if args.gen > 0 && args.batch > 1 {
        Some(args.batch)
    } else {
        None
    };
    let (mut secs, mut batch_secs) = (Vec::new(), Vec::new());
    if args.gen > 0 {
        for rep in 0..args.reps {
            let mut state = model.new_state(args.gen);
            secs.push(decode(model, &mut state, args.gen, 2 + rep as u64)?);
            if let Some(b) = batch {
                batch_secs.push(decode_batch(model, b, args.gen, rep)?);
            }
        }
    }
    let tg = (args.gen > 0).then(|| {
        let f = Figure::of(args.gen, None, &secs);
        say(format!("tg{}: {:.1} tok/s", args.gen, f.tok_s_median));
        f
    });
    let tg_batch = batch.map(|b| Figure::of(args.gen * b, None, &batch_secs));
    let batch_ratio = tg.as_ref().zip(tg_batch.as_ref()).map(|(one, all)| {
        let r = all.tok_s_median / one.tok_s_median;
        say(format!(
            "tg{} x {} sequences: {:.1} tok/s, {r:.2}x one sequence",
            args.gen, args.batch, all.tok_s_median
        ));
        r
    });

    let mut kv_bytes = None;
    let mut pp_depth = None;
    let tg_depth = if args.gen > 0 && args.depth > 0 {
        let mut state = model.new_state(args.depth + args.gen);
        let t = Instant::now();
        for chunk in tokens(args.depth, vocab, 3).chunks(DEPTH_CHUNK) {
            model.forward_batch(&mut state, chunk, Logits::None)?;
        }
        let f = Figure::of(args.depth, None, &[t.elapsed().as_secs_f64()]);
        say(format!(
            "pp{} (the depth, chunks of {DEPTH_CHUNK}): {:.1} tok/s",
            args.depth, f.tok_s_median
        ));
        pp_depth = Some(f);
        let mut secs = Vec::new();
        for rep in 0..args.reps {
            state.cache.truncate(args.depth);
            secs.push(decode(model, &mut state, args.gen, 4 + rep as u64)?);
        }
        kv_bytes = Some(state.cache.bytes());
        let f = Figure::of(args.gen, Some(args.depth), &secs);
        say(format!(
            "tg{} @ d{}: {:.1} tok/s",
            args.gen, args.depth, f.tok_s_median
        ));
        Some(f)
    } else {
        None
    };

    let report = Report {
        model: args.model.display().to_string(),
        pp,
        tg,
        tg_batch,
        batch_ratio,
        tg_depth,
        pp_depth,
        load_s,
        ttft_s,
        peak_rss_bytes: peak_rss_bytes(),
        kv: model.config.kv.name(),
        kv_bytes,
        step_bytes_at_depth: (args.depth > 0).then(|| {
            model.step_bytes() + model.kv_bytes(args.depth + args.gen / 2, model.config.kv)
        }),
        threads: pocket::pool::global().threads(),
        isa: model.config.cpu.isa().name(),
        activations: model.config.activations.name(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{}: load {:.2} s, first token {:.2} s, peak RSS {:.0} MB, {} threads, kernels {} \
             ({} activations, {} KV cache)",
            report.model,
            report.load_s,
            report.ttft_s,
            report.peak_rss_bytes as f64 / 1e6,
            report.threads,
            report.isa,
            report.activations,
            report.kv
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The process's peak resident set (Linux `VmHWM`); 0 where unknown.
pub(crate) fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
