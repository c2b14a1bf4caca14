//! `pocket`: the command-line front end. Each subcommand lives in its own module and only
//! parses arguments, calls the library and prints.
//!
//! Exit codes: 0 success; 1 bad input or a failed operation (the message names the file and
//! what is wrong); 2 bad usage; 3 the subcommand or option is not built yet.

mod inspect;
mod pending;
mod run;
mod term;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "pocket",
    version,
    about = "Small on-device chat models: from a Hugging Face checkpoint to a fast, small, verified CPU build",
    after_help = "Exit codes: 0 success, 1 bad input or failure, 2 bad usage, 3 not built yet."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Export an HF checkpoint to a packed .pocket INT4 file or a GGUF [not built yet]
    Export(pending::Pending),
    /// Quantize weights (block-64 W4A16 INT4, INT8, F16) with an error report [not built yet]
    Quantize(pending::Pending),
    /// Chat with a model, or answer one prompt (-p or stdin) for scripts
    Run(run::RunArgs),
    /// Evaluate a model (IFEval, GSM8K, ...) and the drift of its quantized build [not built yet]
    Eval(pending::Pending),
    /// Measure prefill and decode speed against peers [not built yet]
    Bench(pending::Pending),
    /// Show a model's architecture, parameters, tensors, tokenizer and chat template
    Inspect(inspect::InspectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::main(args),
        Command::Inspect(args) => inspect::main(args),
        Command::Export(_) => pending::main("export", 3),
        Command::Quantize(_) => pending::main("quantize", 3),
        Command::Eval(_) => pending::main("eval", 6),
        Command::Bench(_) => pending::main("bench", 9),
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
