//! `pocket export`: turn a Hugging Face checkpoint into a deployable file.

use crate::convert::{convert, print_summary};
use crate::quant_args::QuantArgs;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
export changes the container: an HF checkpoint becomes one .pocket file (weights, tokenizer, \
chat template and generation defaults inside; memory-mappable) using the standard recipe: \
norms f32, every linear layer and the embedding at --quant. For control over the recipe \
(embedding type, per-tensor overrides, scale method, QAT handling) and a per-tensor error \
report, use `pocket quantize`.

Examples:
  pocket export models/smollm2-135m-instruct -o smollm2.pocket
  pocket export HF_DIR -o model-q8.pocket --quant q8")]
pub struct ExportArgs {
    /// HF checkpoint directory (config.json, *.safetensors, tokenizer.json)
    pub input: PathBuf,
    /// Output file
    #[arg(short, long)]
    pub output: PathBuf,
    /// Output format: pocket (gguf and mnn are planned: issues #5 and #8)
    #[arg(long, default_value = "pocket", value_parser = ["pocket", "gguf", "mnn"])]
    pub format: String,
    #[command(flatten)]
    pub quant: QuantArgs,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: ExportArgs) -> Result<ExitCode> {
    if args.format != "pocket" {
        eprintln!(
            "pocket export --format {}: not built yet (planned in issue #{}).",
            args.format,
            if args.format == "gguf" { 5 } else { 8 }
        );
        return Ok(ExitCode::from(3));
    }
    let recipe = args.quant.recipe(None)?;
    let (report, secs) = convert(&args.input, &args.output, &recipe, args.json)?;
    if args.json {
        println!("{}", serde_json::json!({"seconds": secs, "report": report}));
    } else {
        print_summary(&report, secs);
    }
    Ok(ExitCode::SUCCESS)
}
