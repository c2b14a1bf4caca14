//! `pocket`: the command-line front end. Each subcommand lives in its own module and only
//! parses arguments, calls the library and prints.
//!
//! Exit codes: 0 success; 1 bad input or a failed operation (the message names the file and
//! what is wrong); 2 bad usage; 3 the subcommand or option is not built yet.

mod bench;
mod budget;
mod convert;
mod data_dir;
mod decide;
mod eval;
mod export;
mod inspect;
mod memory;
mod quant_args;
mod quantize;
mod run;
#[cfg(feature = "serve")]
mod serve;
mod settings;
mod speculate_args;
mod term;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The system allocator with a per-thread budget for chat-template rendering
/// (`pocket::alloc_guard`).
#[global_allocator]
static ALLOC: pocket::alloc_guard::GuardedAlloc = pocket::alloc_guard::GuardedAlloc;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "pocket",
    version,
    about = "Small on-device chat models: from a Hugging Face checkpoint to a fast, small, verified CPU build",
    after_help = "Exit codes: 0 success, 1 bad input or failure, 2 bad usage, 3 not built yet."
)]
struct Cli {
    /// How quantized weights meet the activations: int8x2 (the default: two int8 digits per
    /// block, the value and its residual, on the integer kernels; as exact as f32 to a KL of
    /// 1e-6, at int8's decode speed and about 0.6 of its prefill speed), int8 (one digit:
    /// llama.cpp's q8 activations, the fastest prefill, KL about 0.005 from f32) or f32 (W4A16
    /// proper: f32 activations and an f32 KV cache, the exact path; slow). Same as
    /// POCKET_ACT=int8x2|int8|f32; docs/quantization.md, "Activation precision"
    #[arg(long, global = true, value_enum, hide_short_help = true)]
    activations: Option<ActivationsArg>,
    /// The KV cache's element type: f16 (the default), f32 (the exact path's), or q8 (int8
    /// with an f16 scale per 32 dimensions: half of f16's memory and of the bytes decoding
    /// reads at depth; docs/performance.md, "Long context"). q4 (4-bit, llama.cpp's q4_0
    /// rounding, a quarter of f16) is there to measure what it costs: it misses the quality
    /// bar q8 meets on small models and runs scalar attention only, so it is slow. Same as
    /// POCKET_KV
    #[arg(long, global = true, value_enum, hide_short_help = true)]
    kv: Option<KvArg>,
    /// A LoRA adapter to run with, unmerged: a PEFT directory (adapter_config.json +
    /// adapter_model.safetensors) or a GGUF LoRA file, at an optional scale (default 1);
    /// repeatable, for run, decide, eval, bench and serve (docs/lora.md). `serve` also takes
    /// NAME=PATH[:SCALE], the name requests choose it by
    #[arg(
        long = "lora",
        global = true,
        value_name = "PATH[:SCALE]",
        hide_short_help = true
    )]
    lora: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum ActivationsArg {
    Int8x2,
    Int8,
    F32,
}

impl From<ActivationsArg> for pocket::config::Activations {
    fn from(a: ActivationsArg) -> Self {
        match a {
            ActivationsArg::Int8x2 => pocket::config::Activations::Int8x2,
            ActivationsArg::Int8 => pocket::config::Activations::Int8,
            ActivationsArg::F32 => pocket::config::Activations::F32,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum KvArg {
    F16,
    F32,
    Q8,
    Q4,
}

#[derive(Subcommand)]
enum Command {
    /// Export a model (an HF checkpoint, a GGUF or a .pocket) to a .pocket file (a GGUF's blocks
    /// kept; else INT4 by default), a GGUF or an MNN package
    Export(export::ExportArgs),
    /// Quantize (block Q4 with scale search, Q8, F16) with per-tensor error report and QAT import
    Quantize(quantize::QuantizeArgs),
    /// Chat with a model, or answer one prompt (-p or stdin) for scripts
    Run(run::RunArgs),
    /// Answer typed questions (choice, yes/no, score) with probabilities from one forward
    /// pass: the System One decision API on the command line; `decide fit` calibrates
    Decide(decide::DecideArgs),
    /// Evaluate a model: IFEval, GSM8K, multiple choice, perplexity; compare two builds
    Eval(eval::EvalArgs),
    /// Serve a model over an OpenAI-compatible HTTP API (chat, completions, streaming, JSON
    /// schemas, tool calls) with continuous batching
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
    /// Measure prompt-processing and generation speed (tok/s), load time and peak memory
    Bench(bench::BenchArgs),
    /// Show a model's architecture, parameters, tensors, tokenizer and chat template
    Inspect(inspect::InspectArgs),
}

/// `pocket inspect MODEL | head` closes stdout early: stop quietly, as other CLI tools do,
/// instead of reporting the failed print as a crash.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(a) = cli.activations {
        settings::set_activations_flag(a.into());
    }
    if let Some(k) = cli.kv {
        settings::set_kv_flag(match k {
            KvArg::F16 => pocket::config::KvPrecision::F16,
            KvArg::F32 => pocket::config::KvPrecision::F32,
            KvArg::Q8 => pocket::config::KvPrecision::Q8,
            KvArg::Q4 => pocket::config::KvPrecision::Q4,
        });
    }
    settings::set_lora_flags(cli.lora.clone());
    let result = match cli.command {
        Command::Run(args) => run::main(args),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::main(args),
        Command::Inspect(args) => inspect::main(args),
        Command::Export(args) => export::main(args),
        Command::Quantize(args) => quantize::main(args),
        Command::Decide(args) => decide::main(args, matches.subcommand_matches("decide")),
        Command::Eval(args) => eval::main(args),
        Command::Bench(args) => bench::main(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line: what failed, naming the file, and why.
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
