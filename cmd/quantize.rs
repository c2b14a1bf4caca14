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
  pocket quantize QAT_DIR -o qat.pocket --qat strict
  pocket quantize HF_DIR -o m.pocket --bpw 4.8 --sensitivity m.sens.json   (fit 4.8 bits/param)
  pocket quantize HF_DIR -o s.pocket --size 150MB --sensitivity m.sens.json   (reuses it)")]
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
    // Types pinned by hand stay out of a size budget's choice.
    let budget = args.quant.size_target()?.map(|target| {
        let mut pins: Vec<String> = recipe.overrides.iter().map(|(p, _)| p.clone()).collect();
        if args.recipe.embed.is_some() {
            pins.extend(["model.embed_tokens.weight".into(), "lm_head.weight".into()]);
        }
        crate::convert::Budget {
            target,
            pins,
            saved: args.quant.sensitivity.clone(),
        }
    });
    let (report, secs, fitted) = convert(
        &args.input,
        &args.output,
        &recipe,
        &args.quant.calib_args(),
        budget.as_ref(),
        args.json,
    )?;
    let measured = match &fitted {
        Some(_) => Some(crate::convert::requantize_drift(
            &args.input,
            &args.output,
            args.json,
        )?),
        None => None,
    };
    let written = fitted.as_ref().map_or(&recipe, |f| &f.recipe);
    let mut full = serde_json::json!({"seconds": secs, "recipe": written, "report": report});
    if let Some((kl, top1, n)) = measured {
        full["drift_from_source"] =
            serde_json::json!({"kl_mean": kl, "top1_agree": top1, "tokens": n, "text": "builtin"});
    }
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
    if let (Some(f), Some(m)) = (&fitted, measured) {
        crate::convert::print_fitted(f, m, args.json);
    }
    Ok(ExitCode::SUCCESS)
}
