//! `pocket export`: turn a Hugging Face checkpoint into a deployable file.

use crate::convert::{convert, print_summary, requantize_drift, Ticker};
use crate::quant_args::QuantArgs;
use anyhow::Result;
use anyhow::{bail, Context};
use clap::Args;
use pocket_formats::gguf::export::write_gguf;
use pocket_formats::gguf::GgmlType;
use pocket_formats::mnn::write_mnn;
use pocket_formats::model_file::ModelFile;
use pocket_formats::pocket::reader::PocketFile;
use pocket_formats::recipe::Recipe;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
export changes the container: an HF checkpoint becomes one .pocket file (weights, tokenizer, \
chat template and generation defaults inside; memory-mappable) using the standard recipe: \
norms f32, every linear layer and the embedding at --quant. For control over the recipe \
(embedding type, per-tensor overrides, scale method, QAT handling) and a per-tensor error \
report, use `pocket quantize`. A GGUF input keeps its quantized blocks bit for bit (the same \
model, a file no larger; the engine packs them at load as it does the GGUF's); --quant TYPE \
re-quantizes them and then reports the KL from the GGUF on the built-in text, with a verdict. \
--size/--bpw choose each weight matrix's type to fit a file size, by each tensor's measured \
effect on the output (docs/quantization.md, section Size budget).

GGUF export writes what llama.cpp's converter writes (metadata keys, tensor names, the q/k row \
order of `llama`, tokenizer.ggml.*); weights already in our Q4 carry over to Q4_0/Q4_1 without \
requantizing where f16 holds them exactly (the rest are counted). With a 4-bit GGUF type the \
embedding/head is stored as Q8_0, as llama.cpp's quantizer does.

Examples:
  pocket export models/smollm2-135m-instruct -o smollm2.pocket
  pocket export models/smollm2-135m-instruct -o smollm2-q8_0.gguf --format gguf --quant q8_0
  pocket export models/smollm2-135m-instruct -o smollm2-iq4_nl.gguf --format gguf --quant iq4_nl
  pocket export SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.pocket   (the GGUF's blocks kept)
  pocket export model.gguf -o model-q4.pocket --quant q4   (re-quantized; reports the KL it cost)
  pocket export HF_DIR -o model.pocket --size 173MB   (each weight matrix's type chosen to fit)
  pocket export HF_DIR -o model-q8.pocket --quant q8")]
pub struct ExportArgs {
    /// The model: an HF checkpoint directory (config.json, *.safetensors, tokenizer.json), a
    /// GGUF (its quantized blocks are kept bit for bit unless --quant is given) or a .pocket
    pub input: PathBuf,
    /// Output file
    #[arg(short, long)]
    pub output: PathBuf,
    /// Output format: pocket, or gguf (llama.cpp; --quant f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|iq4_xs,
    /// with q4 meaning q4_1, or q4_0 with --sym; the 4-bit types take the calibrated scale
    /// search, as a .pocket does: our search for Q4_0/Q4_1/Q5_0/Q5_1, llama-quantize's for
    /// IQ4_NL and IQ4_XS (whose rows not a multiple of 256 take IQ4_NL, as llama-quantize's
    /// do), weighted by the calibration activations), or mnn (a directory MNN 3.6 loads: Q4 weights copied
    /// from a .pocket, or exported with the Q4 recipe first)
    #[arg(long, default_value = "pocket", value_parser = ["pocket", "gguf", "mnn"])]
    pub format: String,
    #[command(flatten)]
    pub quant: QuantArgs,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: ExportArgs) -> Result<ExitCode> {
    let size = args.quant.size_target()?;
    if size.is_some() && args.format != "pocket" {
        bail!(
            "--size/--bpw choose among .pocket storage types; a {} export takes one --quant type",
            args.format
        );
    }
    match args.format.as_str() {
        "gguf" => return gguf(&args),
        "mnn" => return mnn(&args),
        _ => {}
    }
    let recipe = args.quant.recipe(None)?;
    let budget = size.map(|target| crate::convert::Budget {
        target,
        pins: Vec::new(),
        saved: args.quant.sensitivity.clone(),
    });
    let (report, secs, fitted) = convert(
        &args.input,
        &args.output,
        &recipe,
        &args.quant.calib_args(),
        budget.as_ref(),
        args.json,
    )?;
    // Re-quantizing a GGUF's blocks changes the model: say by how much, measured.
    // So does fitting a size: measured the same way.
    let requantized = !recipe.keep_source_blocks && fitted.is_none() && is_gguf(&args.input);
    let drift = if requantized || fitted.is_some() {
        Some(requantize_drift(&args.input, &args.output, args.json)?)
    } else {
        None
    };
    if args.json {
        let mut v = serde_json::json!({"seconds": secs, "report": report});
        if let Some(f) = &fitted {
            v["recipe"] = serde_json::to_value(&f.recipe)?;
        }
        if let Some(d) = &drift {
            v["drift_from_source"] = serde_json::json!({
                "kl_mean": d.0, "top1_agree": d.1, "tokens": d.2, "text": "builtin"
            });
        }
        println!("{v}");
    } else {
        print_summary(&report, secs);
    }
    if let (Some(f), Some(d)) = (&fitted, drift) {
        crate::convert::print_fitted(f, d, args.json);
    }
    if !args.json && requantized {
        if let Some((kl, top1, n)) = drift {
            let verdict = if kl < 0.005 {
                "close to the GGUF"
            } else if kl < 0.03 {
                "measurably worse than the GGUF: keep the GGUF's blocks (export without --quant/--block/--sym) unless the size matters"
            } else {
                "a worse model than the GGUF: keep its blocks (export without --quant/--block/--sym), or use --quant q8"
            };
            println!(
                "re-quantized from the GGUF: KL {kl:.4} from it on the built-in text ({n} tokens), top-1 agreement {:.1} %: {verdict}",
                top1 * 100.0
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn is_gguf(p: &std::path::Path) -> bool {
    matches!(
        pocket_formats::sniff::sniff(p),
        Ok(pocket_formats::sniff::Kind::Gguf)
    )
}

/// The input as a temporary `.pocket` at `recipe`, quietly: the staging step of the GGUF and
/// MNN exports, which write from a `.pocket`.
fn stage_source(args: &ExportArgs, tmp: &std::path::Path, recipe: &Recipe) -> Result<()> {
    convert(
        &args.input,
        tmp,
        recipe,
        &args.quant.calib_args(),
        None,
        true,
    )?;
    Ok(())
}

fn gguf(args: &ExportArgs) -> Result<ExitCode> {
    let ty = match (args.quant.quant_name(), args.quant.sym) {
        ("f32", _) => GgmlType::F32,
        ("f16", _) => GgmlType::F16,
        ("bf16", _) => GgmlType::BF16,
        ("q8" | "q8_0", _) => GgmlType::Q8_0,
        ("q4_0", _) | ("q4", true) => GgmlType::Q4_0,
        ("q4_1", _) | ("q4", false) => GgmlType::Q4_1,
        ("iq4_nl", _) => GgmlType::IQ4NL,
        ("iq4_xs", _) => GgmlType::IQ4XS,
        ("q5_0", _) => GgmlType::Q5_0,
        ("q5_1", _) => GgmlType::Q5_1,
        (other, _) => {
            bail!("--quant {other} is not a GGUF export type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs)")
        }
    };
    // Flags a GGUF export cannot honour are refused rather than ignored.
    if args.quant.gptq && PocketFile::sniff(&args.input) {
        bail!("--gptq re-quantizes from full-precision weights; {} is a .pocket, already quantized: export from its source checkpoint", args.input.display());
    }
    let compensable = matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::IQ4NL
            | GgmlType::IQ4XS
    );
    if args.quant.gptq && !compensable {
        bail!(
            "--gptq applies to the GGUF export's 4- and 5-bit types (q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs) and to .pocket files, not {}",
            ty.name()
        );
    }
    if args.quant.gptq && args.quant.calib_args().calib == "none" {
        bail!("--gptq compensates over the calibration activations: give --calib builtin or a text file, not none");
    }
    if args.quant.block != 64 {
        bail!("--block applies to .pocket Q4; GGUF's 4-bit types have blocks of 32 (--quant q4_0|q4_1)");
    }
    // 4-bit GGUF types take the same calibrated scale search as a .pocket: the weights are
    // first quantized to our Q4 with blocks of 32 (Q4_0 is our symmetric form; Q4_1's zero
    // points are searched in its convention) in a temporary .pocket, whose blocks the GGUF
    // writer then carries over unchanged. The embedding stays f32 there and becomes Q8_0 as
    // before. `--calib none --method rtn` gives llama-quantize's plain rounding.
    /// A temporary directory (next to the output), removed however the export ends.
    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let mut _temp = None;
    let searched = matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1) && !PocketFile::sniff(&args.input);
    let input = if searched {
        let parent = args
            .output
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let name = args
            .output
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let dir = parent.join(format!(".{name}.q4.tmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the temporary directory {}", dir.display()))?;
        _temp = Some(TempDir(dir.clone()));
        // Named as the input, so the GGUF's general.name is the model's, not the temporary's.
        let stem = args
            .input
            .file_stem()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "model".into());
        let tmp = dir.join(format!("{stem}.pocket"));
        let recipe = pocket_formats::recipe::Recipe {
            linear: pocket_formats::quant::QuantType::Q4 {
                block: 32,
                sym: ty == GgmlType::Q4_0,
            },
            embed: pocket_formats::quant::QuantType::F32,
            allow_nonfinite: args.quant.allow_nonfinite,
            // Every weight from its values: a QAT layer's own grid (block 128, say) would not
            // carry into a GGUF block of 32.
            qat: pocket_formats::recipe::QatMode::Off,
            gptq: args.quant.gptq,
            ..Default::default()
        };
        stage_source(args, &tmp, &recipe)?;
        tmp
    } else {
        args.input.clone()
    };
    // IQ4_NL's, IQ4_XS's and the 5-bit types' scale searches weigh each weight by its
    // column's activations, as llama-quantize does with an imatrix; with --gptq the same
    // calibration pass also gives each layer input's compensation.
    let weighted = ty.is_searched();
    let (importance, compensation) = match weighted && !PocketFile::sniff(&args.input) {
        true => match crate::convert::calibration_with(
            &args.input,
            &args.quant.calib_args(),
            args.quant.gptq,
            args.json,
        )? {
            Some((i, c, _)) => (Some(i), args.quant.gptq.then_some(c)),
            None => (None, None),
        },
        false => (None, None),
    };
    let source = ModelFile::open(&input)?;
    let merged = match crate::settings::has_lora() && !searched {
        true => {
            Some(crate::settings::open_model(&args.input, crate::settings::load_options(true)?)?.0)
        }
        false => None,
    };
    let merge = match &merged {
        Some(m) => {
            crate::convert::merge_note(&source, &args.input);
            let set = m.model.lora.as_ref().expect("--lora attached its adapters");
            Some(pocket::model::merge::Merge::new(&m.model, set)?)
        }
        None => None,
    };
    let ticker = Ticker::new(args.json, "writing");
    let start = std::time::Instant::now();
    let report = write_gguf(
        &source,
        ty,
        args.quant.allow_nonfinite,
        merge
            .as_ref()
            .map(|m| m as &dyn pocket_formats::convert::Edits),
        importance.as_ref(),
        compensation.as_ref(),
        &args.output,
        &|done, total, name| ticker.tick(done, total, name),
    )
    .with_context(|| format!("writing {}", args.output.display()))?;
    ticker.finish();
    let secs = start.elapsed().as_secs_f64();
    let (carried, inexact): (usize, usize) = report.tensors.iter().fold((0, 0), |(a, b), t| {
        (a + t.carried_blocks, b + t.inexact_blocks)
    });
    if args.json {
        println!("{}", serde_json::json!({"seconds": secs, "report": report}));
    } else {
        println!(
            "wrote {} ({:.2} MB, GGUF {}) in {secs:.1} s",
            report.output,
            report.file_bytes as f64 / 1e6,
            ty.name()
        );
        if carried + inexact > 0 {
            println!("Q4 blocks carried over unchanged: {carried}; re-quantized because f16 could not hold them: {inexact}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// MNN's LLM package. A `.pocket` with Q4 weights is copied as it is; any other input is first
/// exported to a temporary `.pocket` with the usual recipe (so the same scale search runs).
fn mnn(args: &ExportArgs) -> Result<ExitCode> {
    let start = std::time::Instant::now();
    let dir = &args.output;
    if dir.is_file() {
        bail!(
            "{}: is a file; MNN export writes a directory",
            dir.display()
        );
    }
    /// Removes the intermediate `.pocket` however the export ends.
    struct Temp(PathBuf);
    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let mut _temp = None;
    // A .pocket is copied as it is, unless adapters are merged into it (then it is exported
    // again, re-quantizing what they change).
    let pocket = if PocketFile::sniff(&args.input) && !crate::settings::has_lora() {
        args.input.clone()
    } else {
        // Next to the package, not in it: a failed export leaves no directory behind.
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let tmp = parent.join(format!(".{name}.source.tmp-{}.pocket", std::process::id()));
        _temp = Some(Temp(tmp.clone()));
        // MNN takes our Q4: a GGUF's blocks are re-quantized, not kept.
        let mut recipe = args.quant.recipe(None)?;
        recipe.keep_source_blocks = false;
        stage_source(args, &tmp, &recipe)?;
        tmp
    };
    let source = ModelFile::open(&pocket)?;
    let ticker = Ticker::new(args.json, "writing");
    let report = write_mnn(&source, dir, &|done, total, name| {
        ticker.tick(done, total, name)
    })
    .with_context(|| format!("writing the MNN package {}", dir.display()))?;
    ticker.finish();
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::json!({"seconds": secs, "report": report}));
    } else {
        println!(
            "wrote {} ({:.2} MB: {} ops, {} int4 linear layers copied from the Q4 weights) in {secs:.1} s",
            report.output,
            report.total_bytes as f64 / 1e6,
            report.ops,
            report.linear_layers
        );
    }
    Ok(ExitCode::SUCCESS)
}
