//! `pocket eval compare A B` (drift between two runs of a task) and `pocket eval score ifeval`
//! (an existing responses file, no model). The statistics are the evals crate's; this file
//! reads the files and prints.

use super::{model_name, print_metrics, report};
use anyhow::Result;
use clap::{Args, Subcommand};
use pocket_evals::compare::{compare, read_run, Comparison, MetricComparison, BOOTSTRAP_RESAMPLES};
use pocket_evals::ifeval;
use pocket_evals::results::ItemScores;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
A and B are `--out` results logs or `--json` reports of the same task (e.g. the bf16 checkpoint \
and its Q4 build). Items are paired by id. For every score: both values, B − A in points with a \
95% paired bootstrap interval (items resampled whole, 10,000 draws, fixed seed), the units that \
flipped each way, and McNemar's exact p-value on those flips. A difference whose interval \
contains 0 and whose p-value is above 0.05 is within run-to-run noise for this many items.")]
pub struct CompareArgs {
    /// First run (the baseline)
    pub a: PathBuf,
    /// Second run
    pub b: PathBuf,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// List at most N flipped ids per score and direction (0: counts only)
    #[arg(long, default_value_t = 20)]
    pub show: usize,
}

#[derive(Subcommand)]
pub enum ScoreTask {
    /// Score IFEval responses: one {"key": int | "prompt": str, "response": str} per line (an
    /// `eval ifeval --out` file is one)
    Ifeval(ScoreIfevalArgs),
}

#[derive(Args)]
pub struct ScoreIfevalArgs {
    /// The responses file
    #[arg(long)]
    pub responses: PathBuf,
    /// IFEval's input_data.jsonl
    #[arg(long, default_value = "data/ifeval/input_data.jsonl")]
    pub data: PathBuf,
    /// Print one JSON report (readable by `eval compare`) instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn score(task: ScoreTask) -> Result<ExitCode> {
    let ScoreTask::Ifeval(a) = task;
    let scored = ifeval::score_file(&a.data, &a.responses)?;
    let items: Vec<ItemScores> = scored
        .verdicts
        .iter()
        .map(|v| ifeval::item_scores(v.key, &v.instruction_ids, &v.strict, &v.loose))
        .collect();
    let name = model_name(&a.responses);
    let details = json!({"responses": a.responses, "data": a.data, "per_instruction": scored.per_instruction});
    let r = report("ifeval", &name, items, details)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("ifeval: {} responses in {}", r.n, a.responses.display());
        print_metrics(
            &r,
            &[
                "prompt_level_strict_acc",
                "inst_level_strict_acc",
                "prompt_level_loose_acc",
                "inst_level_loose_acc",
            ],
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn main(a: CompareArgs) -> Result<ExitCode> {
    let run_a = read_run(&a.a)?;
    let run_b = read_run(&a.b)?;
    let mut c = compare(&run_a, &run_b)?;
    if a.json {
        println!("{}", serde_json::to_string(&c)?);
        return Ok(ExitCode::SUCCESS);
    }
    for m in &mut c.metrics {
        m.a_only_ids.truncate(a.show);
        m.b_only_ids.truncate(a.show);
    }
    print_text(&c, a.show);
    Ok(ExitCode::SUCCESS)
}

fn points(x: f64) -> String {
    format!("{:+.2}", 100.0 * x)
}

fn print_text(c: &Comparison, show: usize) {
    println!("{}: {} paired items", c.task, c.paired_items);
    println!(
        "  A = {} ({}, {} items)",
        c.a.path.display(),
        c.a.model,
        c.a.items
    );
    println!(
        "  B = {} ({}, {} items)",
        c.b.path.display(),
        c.b.model,
        c.b.items
    );
    if c.only_in_a + c.only_in_b > 0 {
        println!(
            "  not paired: {} items only in A, {} only in B (left out)",
            c.only_in_a, c.only_in_b
        );
    }
    println!();
    println!(
        "  {:<26} {:>7} {:>7} {:>8}  {:<18} {:>6} {:>6} {:>9}",
        "score", "A", "B", "B-A pts", "95% CI (pts)", "A>B", "B>A", "McNemar p"
    );
    for m in &c.metrics {
        let ci = m
            .ci95
            .map(|(lo, hi)| format!("[{}, {}]", points(lo), points(hi)))
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:<26} {:>7.4} {:>7.4} {:>8}  {:<18} {:>6} {:>6} {:>9.3}",
            m.metric,
            m.a,
            m.b,
            points(m.diff),
            ci,
            m.a_only,
            m.b_only,
            m.mcnemar_p
        );
    }
    println!();
    for m in &c.metrics {
        println!("  {}: {}", m.metric, judgement(m));
    }
    if show > 0 {
        for m in &c.metrics {
            list("right in A only", m, &m.a_only_ids, m.a_only);
            list("right in B only", m, &m.b_only_ids, m.b_only);
        }
    }
    for (metric, groups) in &c.per_instruction {
        let flipped: Vec<_> = groups
            .iter()
            .filter(|(_, g)| g.a_only + g.b_only > 0)
            .collect();
        if flipped.is_empty() {
            continue;
        }
        println!("\n  {metric}, instructions that flipped (count, A, B, A>B, B>A):");
        for (id, g) in flipped {
            println!(
                "    {id:<50} {:>4} {:>4} {:>4} {:>4} {:>4}",
                g.count, g.a, g.b, g.a_only, g.b_only
            );
        }
    }
    println!(
        "\n  (CI: paired bootstrap over items, {BOOTSTRAP_RESAMPLES} draws; p: exact McNemar on the flips)"
    );
}

/// One line a reader can act on.
fn judgement(m: &MetricComparison) -> String {
    let contains_zero = m.ci95.is_none_or(|(lo, hi)| lo <= 0.0 && 0.0 <= hi);
    if m.a_only + m.b_only == 0 {
        "identical on every unit".to_string()
    } else if contains_zero && m.mcnemar_p >= 0.05 {
        format!(
            "{} points, within noise ({} vs {} flips, p = {:.2}, interval contains 0)",
            points(m.diff),
            m.a_only,
            m.b_only,
            m.mcnemar_p
        )
    } else {
        format!(
            "{} points, unlikely to be noise ({} vs {} flips, p = {:.3})",
            points(m.diff),
            m.a_only,
            m.b_only,
            m.mcnemar_p
        )
    }
}

fn list(what: &str, m: &MetricComparison, ids: &[String], total: usize) {
    if total == 0 {
        return;
    }
    let more = if total > ids.len() {
        format!(" … and {} more", total - ids.len())
    } else {
        String::new()
    };
    println!("  {} {what} ({total}): {}{more}", m.metric, ids.join(" "));
}
