//! The shared path of `export` and `quantize`: open the source, write the `.pocket` with a
//! progress bar, print a summary or the per-tensor report.

use crate::term::thousands;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use pocket::calibrate::{calibrate, BUILTIN_TEXT};
use pocket_formats::convert::{write_pocket, ConvertReport};
use pocket_formats::model_file::ModelFile;
use pocket_formats::quant::QuantType;
use pocket_formats::recipe::{CalibrationInfo, Recipe};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

/// Where calibration text comes from (`--calib`).
pub struct CalibArgs<'a> {
    pub calib: &'a str,
    pub tokens: usize,
}

/// The model's activation statistics over the calibration text (`--calib`): each linear
/// weight's mean squared input per column, by tensor name, and with `gptq` each layer input's
/// GPTQ compensation factor too. `None` for `--calib none`.
pub fn calibration_with(
    input: &Path,
    calib: &CalibArgs,
    gptq: bool,
    quiet: bool,
) -> Result<
    Option<(
        pocket_formats::convert::Importance,
        pocket_formats::convert::Compensations,
        CalibrationInfo,
    )>,
> {
    let Some((text, origin)) = calib_text(calib)? else {
        return Ok(None);
    };
    let (model, _) = crate::settings::open_model(input, crate::settings::load_options(true)?)?;
    let ticker = Ticker::new(quiet, "calibrating");
    let c = calibrate(&model, &text, calib.tokens, 256, gptq, &|done, total| {
        ticker.tick(done as u64, total as u64, "tokens");
    })
    .with_context(|| format!("calibrating on {origin}"))?;
    ticker.finish();
    Ok(Some((
        c.importance,
        c.compensation,
        CalibrationInfo {
            text: origin,
            tokens: c.tokens,
        },
    )))
}

/// The calibration text and where it came from (`builtin` or its path); `None` for `none`.
pub fn calib_text(calib: &CalibArgs) -> Result<Option<(String, String)>> {
    Ok(match calib.calib {
        "none" => None,
        "builtin" => Some((BUILTIN_TEXT.to_string(), "builtin".to_string())),
        path => Some((
            std::fs::read_to_string(path)
                .with_context(|| format!("{path}: cannot read the calibration text"))?,
            path.to_string(),
        )),
    })
}

/// A size to fit (`--size`, `--bpw`) and the name patterns whose types are pinned by hand.
pub struct Budget {
    pub target: crate::quant_args::SizeTarget,
    pub pins: Vec<String>,
    /// Where measured sensitivities are kept and reused (`--sensitivity`).
    pub saved: Option<std::path::PathBuf>,
}

pub fn convert(
    input: &Path,
    output: &Path,
    recipe: &Recipe,
    calib: &CalibArgs,
    budget: Option<&Budget>,
    quiet: bool,
) -> Result<(ConvertReport, f64, Option<crate::budget::Fitted>)> {
    let source = ModelFile::open(input)?;
    if output.exists() && output.is_dir() {
        anyhow::bail!(
            "{}: is a directory; give the output file name",
            output.display()
        );
    }
    let start = Instant::now();
    let mut recipe = recipe.clone();
    // Weights imported already quantized (QAT) keep their grid; the model cannot run from
    // such a checkpoint before conversion, so it is not calibrated.
    let qat_source = source.tensors().iter().any(|t| {
        t.stored
            .is_some_and(|q| q.is_quantized() && !matches!(q, QuantType::Ggml(_)))
    });
    // `--lora`: the adapters are merged (W + s·B·A before quantizing), and the calibration runs
    // the model with them.
    let merged = match crate::settings::has_lora() {
        true => Some(crate::settings::open_model(input, crate::settings::load_options(true)?)?.0),
        false => None,
    };
    let merge = match &merged {
        Some(m) => {
            let set = m.model.lora.as_ref().expect("--lora attached its adapters");
            merge_note(&source, input);
            Some(pocket::model::merge::Merge::new(&m.model, set)?)
        }
        None => None,
    };
    // Only a GGUF has blocks to keep (the recipe records it, and `inspect` says so).
    recipe.keep_source_blocks &= source.is_gguf();
    // A GGUF whose blocks are all kept has nothing to search.
    let kept = recipe.keep_source_blocks && source.is_gguf() && !crate::settings::has_lora();
    if recipe.gptq && (qat_source || kept) {
        anyhow::bail!(
            "--gptq re-quantizes from full-precision weights; {} keeps its quantized blocks (give --quant for a GGUF, or export from the full-precision checkpoint)",
            input.display()
        );
    }
    if recipe.gptq && calib.calib == "none" {
        anyhow::bail!("--gptq compensates over the calibration activations: give --calib builtin or a text file, not none");
    }
    if recipe.gptq && !recipe.compensable() {
        anyhow::bail!("--gptq compensates quantized weights (Q4, Q5, IQ4, Q8); this export stores none: give --quant");
    }
    // A kept measurement (`--sensitivity`) this export cannot use is refused now, not after
    // the calibration pass.
    if let Some(b) = budget {
        if let (Some(path), Some((text, origin))) = (b.saved.as_deref(), calib_text(calib)?) {
            crate::budget::check_saved(path, &source, &b.pins, (&text, &origin), recipe.method)?;
        }
    }
    // Calibrated when a search can use it, or when `--gptq` compensates a Q8 matrix (which
    // has no search to weigh).
    let wants_calibration = recipe.searches_q4() || (recipe.gptq && recipe.compensable());
    let (importance, compensation) = if wants_calibration && !qat_source && !kept {
        match calibration_with(input, calib, recipe.gptq, quiet)? {
            Some((importance, comp, info)) => {
                recipe.calibration = Some(info);
                (Some(importance), Some(comp))
            }
            None => (None, None),
        }
    } else {
        (None, None)
    };
    let fitted = match budget {
        Some(b) => {
            if crate::settings::has_lora() {
                anyhow::bail!("--size/--bpw with --lora is not supported yet: merge the adapter into a full-precision export first");
            }
            if qat_source {
                anyhow::bail!("--size/--bpw re-quantizes every weight matrix; this checkpoint's weights are already on a 4-bit grid (QAT): export it without a size");
            }
            let (Some(importance), Some((text, origin))) = (&importance, calib_text(calib)?) else {
                anyhow::bail!("--size/--bpw needs calibration text (--calib builtin or a file)");
            };
            let how = crate::budget::Measure {
                importance,
                text: &text,
                origin: &origin,
                saved: b.saved.as_deref(),
            };
            Some(crate::budget::fit(
                input,
                &source,
                &mut recipe,
                &how,
                b.target,
                &b.pins,
                quiet,
            )?)
        }
        None => None,
    };
    let recipe = &recipe;
    let ticker = Ticker::new(quiet, "writing");
    let progress = |done: u64, total: u64, name: &str| ticker.tick(done, total, name);
    let edits = merge
        .as_ref()
        .map(|m| m as &dyn pocket_formats::convert::Edits);
    let report = write_pocket(
        &source,
        recipe,
        importance.as_ref(),
        compensation.as_ref(),
        edits,
        output,
        &progress,
    )
    .with_context(|| format!("writing {}", output.display()))?;
    ticker.finish();
    Ok((report, start.elapsed().as_secs_f64(), fitted))
}

/// Merging into a base whose weights are already quantized re-quantizes the adapted ones: said
/// once, on stderr.
pub fn merge_note(source: &ModelFile, input: &Path) {
    let quantized = source
        .tensors()
        .iter()
        .any(|t| t.stored.is_some_and(|q| q.is_quantized()))
        || matches!(source, ModelFile::Gguf { .. });
    if quantized {
        eprintln!(
            "note: {} is already quantized: merging the adapter re-quantizes the weights it \
             changes (from the full-precision base the merge is exact before quantizing)",
            input.display()
        );
    }
}

/// Progress of a long step: a bar on a terminal; when stderr is piped, a line every ten
/// seconds (so a log shows the step is alive); nothing when `quiet` (`--json`).
pub struct Ticker {
    bar: ProgressBar,
    what: &'static str,
    piped: bool,
    last: std::sync::Mutex<Instant>,
}

impl Ticker {
    pub fn new(quiet: bool, what: &'static str) -> Ticker {
        let bar = progress_bar(quiet);
        bar.set_message(what);
        Ticker {
            bar,
            what,
            piped: !quiet && !std::io::stderr().is_terminal(),
            last: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// `done` of `total`, the item just finished.
    pub fn tick(&self, done: u64, total: u64, name: &str) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        self.bar.set_message(format!("{}: {name}", self.what));
        if self.piped {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed().as_secs() >= 10 {
                eprintln!(
                    "{}: {:.0} % ({name})",
                    self.what,
                    done as f64 * 100.0 / total.max(1) as f64
                );
                *last = Instant::now();
            }
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A progress bar on stderr, hidden when `quiet` or when stderr is not a terminal.
pub fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template("{spinner} {bar:40} {percent:>3}% {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

pub fn print_summary(r: &ConvertReport, seconds: f64) {
    let kept: Vec<_> = r.tensors.iter().filter(|t| t.carried).collect();
    let quantized: Vec<_> = r
        .tensors
        .iter()
        .filter(|t| t.dtype.is_quantized() && !t.carried)
        .collect();
    let worst = quantized
        .iter()
        .max_by(|a, b| a.rel_rms.total_cmp(&b.rel_rms));
    println!(
        "wrote {} ({:.2} MB, {} parameters, {:.2} bits/parameter) in {:.1} s",
        r.output,
        r.file_bytes as f64 / 1e6,
        thousands(r.parameters),
        r.file_bytes as f64 * 8.0 / r.parameters.max(1) as f64,
        seconds
    );
    if !kept.is_empty() {
        let mut types: Vec<(String, usize)> = Vec::new();
        for t in &kept {
            let name = t.dtype.to_string();
            match types.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => types.push((name, 1)),
            }
        }
        let list: Vec<String> = types
            .iter()
            .map(|(n, c)| format!("{c} {}", n.trim_start_matches("ggml_").to_uppercase()))
            .collect();
        if quantized.is_empty() {
            println!(
                "kept {} quantized tensors bit for bit from the GGUF ({}): the same model, \
                 nothing re-quantized (--quant TYPE re-quantizes)",
                kept.len(),
                list.join(", ")
            );
        } else {
            println!(
                "kept {} quantized tensors bit for bit from the GGUF ({})",
                kept.len(),
                list.join(", ")
            );
        }
    }
    if !quantized.is_empty() {
        println!(
            "quantized {} tensors: relative RMS error {:.4} overall{}",
            quantized.len(),
            r.rel_rms,
            worst
                .map(|w| format!(", worst {} ({:.4})", w.name, w.rel_rms))
                .unwrap_or_default()
        );
    }
    let qat: Vec<_> = r
        .tensors
        .iter()
        .filter_map(|t| t.qat_blocks.map(|b| (t, b)))
        .collect();
    if !qat.is_empty() {
        let (on, all) = qat
            .iter()
            .fold((0, 0), |(a, b), (_, (x, y))| (a + x, b + y));
        println!(
            "QAT grid: {on} of {all} blocks in {} tensors stored exactly",
            qat.len()
        );
        for (t, (x, y)) in qat.iter().filter(|(_, (x, y))| x < y) {
            println!(
                "  {}: {} blocks off the grid, e.g. (row, block) {:?}",
                t.name,
                y - x,
                &t.off_grid[..t.off_grid.len().min(4)]
            );
        }
    }
    for t in r.tensors.iter().filter(|t| t.note.is_some()) {
        println!("note: {}: {}", t.name, t.note.as_deref().unwrap_or(""));
    }
}

pub fn print_table(r: &ConvertReport) {
    println!(
        "{:<56} {:<9} {:>12} {:>10} {:>10}",
        "tensor", "type", "bytes", "rel_rms", "max_abs"
    );
    for t in &r.tensors {
        println!(
            "{:<56} {:<9} {:>12} {:>10.5} {:>10.5}",
            t.name,
            t.dtype.to_string(),
            t.bytes,
            t.rel_rms,
            t.max_abs
        );
    }
}

/// Mean KL(source ‖ output), top-1 agreement and tokens, over the built-in calibration text
/// (up to 512 tokens, one window), on the default path.
pub fn requantize_drift(
    source: &std::path::Path,
    output: &std::path::Path,
    quiet: bool,
) -> Result<(f64, f64, usize)> {
    use pocket_evals::ppl::{perplexity, PplOptions};
    let options = || crate::settings::load_options(true);
    // The output has any --lora merged already; the source runs with it.
    let out = pocket::loader::LoadedModel::open_with(output, options()?)?;
    let (src, _) = crate::settings::open_model(source, options()?)?;
    let mut tokens = out
        .tokenizer
        .encode(pocket::calibrate::BUILTIN_TEXT, true)?;
    tokens.truncate(512);
    let ctx = tokens.len().min(out.model.spec.max_position_embeddings);
    let mut e = crate::eval::engine::Engine::new(&out, ctx);
    let mut b = crate::eval::engine::Engine::new(&src, ctx);
    let ticker = Ticker::new(quiet, "measuring the KL from the source");
    let r = perplexity(
        &mut e,
        Some(&mut b as &mut dyn pocket_evals::LogitModel),
        &tokens,
        &PplOptions {
            window: ctx,
            chunk: 64,
            prefix: None,
        },
        &|done, total| ticker.tick(done as u64, total as u64, "tokens"),
    )?;
    ticker.finish();
    Ok((
        r.kld_mean.unwrap_or(0.0),
        r.top1_agree.unwrap_or(0.0),
        r.tokens,
    ))
}

/// What `--size`/`--bpw` chose and what it cost, measured after writing (on stderr with
/// `--json`, where the JSON report carries the recipe).
pub fn print_fitted(f: &crate::budget::Fitted, measured: (f64, f64, usize), json: bool) {
    let (kl, top1, n) = measured;
    let types: Vec<String> = f.counts.iter().map(|(t, c)| format!("{c} {t}")).collect();
    let line = format!(
        "size budget {:.2} MB: planned {:.2} MB with {} (chosen in {:.0} s by each tensor's \
         measured effect); KL from the source {kl:.4} on the built-in text ({n} tokens, \
         predicted {:.4}), top-1 agreement {:.1} %",
        f.target_bytes as f64 / 1e6,
        f.planned_bytes as f64 / 1e6,
        types.join(", "),
        f.seconds,
        f.predicted_kl,
        top1 * 100.0
    );
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}
