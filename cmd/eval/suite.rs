//! `pocket eval suite MODEL [--model B]`: the model card's benchmark suite as one command
//! (rows and headline metrics in the evals crate's `suite`), per-task scores, the unweighted
//! average as the card computes it, and with two builds B − A per task and for the average
//! with paired 95 % intervals and the flips. Each task's log lives under `--work`, so a run
//! resumes where it stopped (the same logs as `pocket eval --model A --model B`).

use super::drift::{run_one, DriftArgs};
use super::generation::Done;
use anyhow::{bail, Result};
use clap::Args;
use pocket_evals::compare::{compare, RunFile, BOOTSTRAP_RESAMPLES};
use pocket_evals::results::units;
use pocket_evals::shards::Shard;
use pocket_evals::stats::{stratified_bootstrap_mean_diff, PairedItem};
use pocket_evals::suite::{self, Status};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
Rows: IFEval (prompt-level strict), GSM8K (gsm8k_cot, flexible extraction), HumanEval \
(humaneval_instruct, pass@1), MATH500 (string equivalence only: a lower bound), MBPP, MMLU \
(5-shot, acc), ARC-Challenge, HellaSwag and GPQA Diamond (acc_norm), BBH (27 tasks, chain of \
thought, exact match); IFEval-zh, C-Eval and CMMLU have no data reachable here (C-Eval/CMMLU \
run from your file with `eval mc`): their rows say so and stay out of the average, which is over \
the rows that ran (the card's is over 11). Data: scripts/fetch-eval-data.sh.

Examples:
  pocket eval suite model.gguf --limit 50
  pocket eval suite model.gguf --model model-q4.pocket --tasks card --card mnn-pocket --json suite.json")]
pub struct SuiteArgs {
    /// Model (A, the baseline when --model B is given)
    pub model: PathBuf,
    /// A second build, compared with MODEL on the same items
    #[arg(long = "model", value_name = "B")]
    pub model_b: Option<PathBuf>,
    /// card (the card's named benchmarks), all, or a comma list of rows or task names
    #[arg(long, default_value = "card")]
    pub tasks: String,
    /// Evaluate only the first N items of each task
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Where the data sets are (scripts/fetch-eval-data.sh's layout)
    #[arg(long, default_value_os_t = crate::data_dir::data_root(), value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Directory for each run's results log (runs resume from them)
    #[arg(long, default_value = "eval-runs")]
    pub work: PathBuf,
    /// Print the vendor's published averages beside ours (marked as theirs): mnn-pocket
    #[arg(long)]
    pub card: Option<String>,
    /// Also write everything (reports with per-item results, comparisons) to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Context length in tokens (default: the model's maximum)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Worker threads, at least 1 (default: one per physical core)
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Answers decoded together per step (1: one at a time)
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Run every prompt from its start instead of continuing from the cached state of the
    /// prompt it shares a beginning with (same answers and scores, slower; for measuring)
    #[arg(long)]
    pub no_shared_prefix: bool,
    /// Run part K of N of every task (items split as `pocket eval TASK --shard` does), its
    /// logs under --work; once every part's logs are in one --work, the command without
    /// --shard joins them and prints the one run's table
    #[arg(long, value_name = "K/N", value_parser = Shard::parse)]
    pub shard: Option<Shard>,
    /// Speculative decoding for the generation tasks (one answer at a time)
    #[command(flatten)]
    pub spec: crate::speculate_args::SpecArgs,
}

struct RowResult {
    name: &'static str,
    status: Status,
    runs: Vec<Done>,
}

pub fn main(a: SuiteArgs) -> Result<ExitCode> {
    let rows = suite::select(&a.tasks).map_err(|e| anyhow::anyhow!("--tasks: {e}"))?;
    let card = match a.card.as_deref() {
        None => None,
        Some(name) => match suite::CARDS.iter().find(|c| c.name == name) {
            Some(c) => Some(c),
            None => bail!("--card {name}: known cards: mnn-pocket"),
        },
    };
    crate::term::set_threads(a.threads)?;
    std::fs::create_dir_all(&a.work).map_err(|e| anyhow::anyhow!("{}: {e}", a.work.display()))?;
    let models: Vec<PathBuf> = std::iter::once(a.model.clone())
        .chain(a.model_b.clone())
        .collect();
    let drift = DriftArgs {
        models: models.clone(),
        tasks: Vec::new(),
        ifeval_data: a.data_dir.join("ifeval/input_data.jsonl"),
        gsm8k_data: a.data_dir.join("gsm8k/test.jsonl"),
        data_dir: a.data_dir.clone(),
        work: a.work.clone(),
        json: None,
        limit: a.limit,
        ctx: a.ctx,
        threads: None,
        batch: a.batch,
        no_shared_prefix: a.no_shared_prefix,
        shard: a.shard,
        spec: a.spec.clone(),
    };
    let mut results = Vec::new();
    for row in rows {
        let mut runs = Vec::new();
        if let Status::Runs { task, .. } = row.status {
            for (i, m) in models.iter().enumerate() {
                eprintln!("{} ({task}): {}", row.name, m.display());
                let done = run_one(&drift, task, i, m)?;
                if let Some(shard) = a.shard {
                    super::drift::part_line(shard, task, &done, m);
                }
                runs.push(done);
            }
        }
        results.push(RowResult {
            name: row.name,
            status: row.status,
            runs,
        });
    }
    if let Some(shard) = a.shard {
        // A part's scores are over its items only: no table, no average.
        if let Some(path) = &a.json {
            let reports: Vec<Value> = results
                .iter()
                .filter(|r| !r.runs.is_empty())
                .map(|r| json!({"row": r.name, "runs": r.runs.iter().map(|d| &d.report).collect::<Vec<_>>()}))
                .collect();
            let all = json!({"models": models, "limit": a.limit, "part": shard.to_string(), "reports": reports});
            pocket_formats::atomic::write_atomic(
                path,
                serde_json::to_string_pretty(&all)?.as_bytes(),
            )?;
        }
        println!("{}", super::drift::part_done(shard, "eval suite"));
        return Ok(ExitCode::SUCCESS);
    }
    let summary = summarize(&results, &models)?;
    print_table(&summary, &models, card);
    if let Some(path) = &a.json {
        let reports: Vec<Value> = results
            .iter()
            .map(|r| json!({"row": r.name, "runs": r.runs.iter().map(|d| &d.report).collect::<Vec<_>>()}))
            .collect();
        let all =
            json!({"models": models, "limit": a.limit, "summary": summary, "reports": reports});
        pocket_formats::atomic::write_atomic(path, serde_json::to_string_pretty(&all)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The numbers of the table: per row, each build's headline score and (with two) the paired
/// comparison; the averages and the interval of their difference.
fn summarize(results: &[RowResult], models: &[PathBuf]) -> Result<Value> {
    let mut rows = Vec::new();
    let mut per_task_pairs: Vec<Vec<PairedItem>> = Vec::new();
    let mut sums = vec![0.0; models.len()];
    let mut counted = 0usize;
    for r in results {
        let Status::Runs { task, metric } = r.status else {
            rows.push(json!({"row": r.name, "status": "data not available"}));
            continue;
        };
        let scores: Vec<f64> = r
            .runs
            .iter()
            .map(|d| d.report.metrics.get(metric).map_or(0.0, |m| m.value))
            .collect();
        for (s, v) in sums.iter_mut().zip(&scores) {
            *s += v;
        }
        counted += 1;
        let mut row = json!({"row": r.name, "task": task, "metric": metric, "n": r.runs[0].report.n, "scores": scores});
        if r.runs.len() == 2 {
            let files: Vec<RunFile> = r
                .runs
                .iter()
                .zip(models)
                .map(|(d, m)| RunFile {
                    path: m.clone(),
                    task: d.report.task.clone(),
                    model: d.report.model.clone(),
                    items: d.report.items.clone(),
                })
                .collect();
            let c = compare(&files[0], &files[1])?;
            if let Some(m) = c.metrics.iter().find(|m| m.metric == metric) {
                row["diff"] = json!(m.diff);
                row["ci95"] = json!(m.ci95);
                row["flips"] = json!([m.a_only, m.b_only]);
                row["mcnemar_p"] = json!(m.mcnemar_p);
            }
            per_task_pairs.push(pairs(&files[0], &files[1], metric));
        }
        rows.push(row);
    }
    let averages: Vec<f64> = sums.iter().map(|s| s / counted.max(1) as f64).collect();
    let mut out = json!({"rows": rows, "tasks_averaged": counted, "averages": averages});
    if models.len() == 2 && counted > 0 {
        out["average_diff"] = json!(averages[1] - averages[0]);
        out["average_ci95"] = json!(stratified_bootstrap_mean_diff(
            &per_task_pairs,
            BOOTSTRAP_RESAMPLES,
            20261203
        ));
    }
    Ok(out)
}

/// The items of both runs paired by id, as units right out of units, for one metric.
fn pairs(a: &RunFile, b: &RunFile, metric: &str) -> Vec<PairedItem> {
    let right = |v: Option<&Value>| {
        v.and_then(units)
            .map(|u| (u.iter().filter(|&&x| x).count() as f64, u.len() as f64))
    };
    let by_id: HashMap<String, (f64, f64)> = b
        .items
        .iter()
        .filter_map(|it| Some((it.id.to_string(), right(it.scores.get(metric))?)))
        .collect();
    a.items
        .iter()
        .filter_map(|it| {
            let (ra, n) = right(it.scores.get(metric))?;
            let (rb, _) = by_id.get(&it.id.to_string())?;
            Some(PairedItem {
                a: ra,
                b: *rb,
                units: n,
            })
        })
        .collect()
}

fn print_table(s: &Value, models: &[PathBuf], card: Option<&suite::Card>) {
    for (i, m) in models.iter().enumerate() {
        println!("{} = {}", ["A", "B"][i], m.display());
    }
    let pts = |v: &Value| {
        v.as_f64()
            .map_or("–".to_string(), |x| format!("{:.2}", 100.0 * x))
    };
    println!(
        "{:<14} {:<20} {:>6} {:>8} {:>8} {:>8}  {:<17} {:>9}",
        "benchmark", "task (metric)", "n", "A", "B", "B−A", "95% CI of B−A", "flips"
    );
    for r in s["rows"].as_array().into_iter().flatten() {
        let name = r["row"].as_str().unwrap_or_default();
        if let Some(why) = r["status"].as_str() {
            println!("{name:<14} {why}");
            continue;
        }
        let ci = r["ci95"]
            .as_array()
            .map(|c| {
                format!(
                    "[{:+.2}, {:+.2}]",
                    100.0 * c[0].as_f64().unwrap_or(0.0),
                    100.0 * c[1].as_f64().unwrap_or(0.0)
                )
            })
            .unwrap_or_default();
        let flips = r["flips"]
            .as_array()
            .map(|f| format!("{}/{}", f[0], f[1]))
            .unwrap_or_default();
        println!(
            "{:<14} {:<20} {:>6} {:>8} {:>8} {:>8}  {:<17} {:>9}",
            name,
            r["task"].as_str().unwrap_or_default(),
            r["n"],
            pts(&r["scores"][0]),
            pts(&r["scores"][1]),
            r["diff"]
                .as_f64()
                .map_or(String::new(), |d| format!("{:+.2}", 100.0 * d)),
            ci,
            flips
        );
    }
    let n = s["tasks_averaged"].as_u64().unwrap_or(0);
    let ci = s["average_ci95"]
        .as_array()
        .map(|c| {
            format!(
                "[{:+.2}, {:+.2}]",
                100.0 * c[0].as_f64().unwrap_or(0.0),
                100.0 * c[1].as_f64().unwrap_or(0.0)
            )
        })
        .unwrap_or_default();
    println!(
        "{:<14} {:<20} {:>6} {:>8} {:>8} {:>8}  {:<17}",
        "average",
        format!("unweighted, {n} tasks"),
        "",
        pts(&s["averages"][0]),
        pts(&s["averages"][1]),
        s["average_diff"]
            .as_f64()
            .map_or(String::new(), |d| format!("{:+.2}", 100.0 * d)),
        ci
    );
    if let Some(c) = card {
        for (build, avg) in c.averages {
            println!(
                "{:<14} vendor's {} card, {build}: {avg:.2} over {} benchmarks (their numbers, their harness; not comparable row for row)",
                "",
                c.name,
                c.benchmarks
            );
        }
    }
    println!("(points; intervals: paired bootstrap over items, the average's stratified by task; flips: right in A only / B only)");
}
