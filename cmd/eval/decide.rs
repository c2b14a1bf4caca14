//! `pocket eval decide`: System One decisions scored on labelled rows (the rows `pocket decide
//! fit` reads): accuracy, log loss, Brier score and expected calibration error, with the
//! temperatures (and head) given, or fitted on a split of the rows.

use crate::decide::fit::{metrics_with, read_rows, score_rows};
use crate::decide::AskArgs;
use anyhow::{bail, Result};
use clap::Args;
use pocket::decide::{Decider, Temperatures};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(after_help = "\
Rows: JSON lines {\"state\", \"question\": {\"type\", \"instructions\", \"criteria\"}, \"gold\"}, \
as `pocket decide fit` reads them. scripts/decision_rows.py writes MMLU and ARC-Challenge \
(data from scripts/fetch-eval-data.sh) in this form, each item a choice question.

Examples:
  pocket eval decide MODEL --data examples/intent/decisions.jsonl
  pocket eval decide MODEL --data rows.jsonl --head intent.head --json")]
pub struct DecideEvalArgs {
    /// Model: an HF checkpoint directory, a GGUF or a .pocket file
    pub model: PathBuf,
    /// Labelled rows (JSON lines)
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Score only the first N rows
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Print the report as JSON, with each row's probabilities
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub ask: AskArgs,
}

pub fn main(a: DecideEvalArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let settings = a.ask.settings()?;
    let (m, ctx) = a.ask.load(&a.model)?;
    let decider = Decider::new(&m, settings)?;
    let mut rows = read_rows(&a.data, &decider)?;
    if let Some(n) = a.limit {
        rows.truncate(n as usize);
    }
    if rows.is_empty() {
        bail!("{}: no rows", a.data.display());
    }
    let (scored, _) = score_rows(&decider, &rows, ctx, false, a.json)?;
    let refs: Vec<_> = scored.iter().collect();
    let temps = decider.temperatures.clone();
    let met = metrics_with(&refs, &temps);
    let zero = metrics_with(&refs, &Temperatures::default());
    let secs = t0.elapsed().as_secs_f64();
    if a.json {
        let items: Vec<_> = rows
            .iter()
            .zip(&scored)
            .map(|(r, s)| {
                let t = temps.get(s.kind, s.variants[0].0.len());
                let p =
                    pocket::decide::answer::probabilities_with(&s.variants, t, temps.bias(s.kind));
                let q = &r.req.questions[0];
                json!({"line": r.line, "gold": q.options[r.gold].key,
                       "pred": q.options[pocket::decide::answer::argmax(&p)].key,
                       "probabilities": p})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "model": crate::decide::model_name(&a.model),
                "data": a.data.display().to_string(),
                "readout": decider.readout_name(), "order": decider.order().name(),
                "reverse": decider.reverse,
                "temperatures": temps.by_name,
                "metrics": met, "zero_shot": zero, "seconds": secs, "items": items,
            }))?
        );
    } else {
        println!(
            "{} rows · {} readout, {}{} · accuracy {:.2} % · log loss {:.4} · Brier {:.4} · ECE {:.4} · {:.1} s",
            met.n,
            decider.readout_name(),
            decider.order().name(),
            if decider.reverse { ", both orders" } else { "" },
            met.accuracy * 100.0,
            met.log_loss,
            met.brier,
            met.ece,
            secs
        );
        if !temps.by_name.is_empty() {
            println!(
                "  without the head's temperatures: log loss {:.4} · Brier {:.4} · ECE {:.4}",
                zero.log_loss, zero.brier, zero.ece
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
