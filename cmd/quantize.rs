//! `pocket quantize`: the quantizer with every knob and a per-tensor error report.

use crate::convert::{convert, print_summary, print_table};
use crate::quant_args::{QuantArgs, RecipeArgs};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
quantize changes the precision: it reads an HF checkpoint or a full-precision (F16/BF16/F32) \
.pocket and writes a .pocket with the recipe you choose, reporting each tensor's relative \
RMS and max error. Weights that already lie on a 4-bit grid (quantization-aware training) \
are stored exactly (--qat). To simply convert a checkpoint with the standard recipe, \
`pocket export` is enough.

Examples:
  pocket quantize HF_DIR -o model.pocket --embed q8 --report errors.json
  pocket quantize HF_DIR -o rtn.pocket --method rtn
  pocket quantize model-f16.pocket -o model-q4s.pocket --sym --block 32 --type '*.layers.0.*=q8'
  pocket quantize QAT_DIR -o qat.pocket --qat strict")]
pub struct QuantizeArgs {
    /// HF checkpoint directory or a full-precision .pocket file
    pub input: PathBuf,
    /// Output .pocket file
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub quant: QuantArgs,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    /// Write the per-tensor error report as JSON to this file
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Print the whole report as JSON on stdout instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: QuantizeArgs) -> Result<ExitCode> {
    let recipe = args.quant.recipe(Some(&args.recipe))?;
    let (report, secs) = convert(
        &args.input,
        &args.output,
        &recipe,
        &args.quant.calib_args(),
        args.json,
    )?;
    let full = serde_json::json!({"seconds": secs, "recipe": recipe, "report": report});
    if let Some(path) = &args.report {
        pocket_formats::atomic::write_atomic(
            path,
            serde_json::to_string_pretty(&full)?.as_bytes(),
        )?;
    }
    if args.json {
        println!("{full}");
    } else {
        print_table(&report);
        print_summary(&report, secs);
    }
    Ok(ExitCode::SUCCESS)
}
