//! `pocket eval --model A --model B --tasks ifeval,gsm8k_cot`: both builds on the same items,
//! then one table of each metric, B − A, its paired bootstrap interval and McNemar's p. Each
//! run keeps a results log under `--work`, so an interrupted drift run resumes where it stopped.

use super::generation::{gsm8k_run, ifeval_run, Done, Gsm8kArgs, IfevalArgs};
use super::{model_name, RunOpts};
use anyhow::{bail, Result};
use clap::Args;
use pocket_evals::compare::{compare, Comparison, RunFile};
use pocket_evals::gsm8k::Variant;
use pocket_evals::shards::Shard;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
// The data paths, logs and batching have working defaults: `--help` only, as is speculation.
#[command(mut_arg("speculate", |a| a.hide_short_help(true)))]
#[command(mut_arg("draft", |a| a.hide_short_help(true)))]
pub struct DriftArgs {
    /// A build to evaluate; give two (the first is the baseline), e.g. --model HF_DIR --model
    /// model-q4.pocket
    #[arg(long = "model", value_name = "MODEL")]
    pub models: Vec<PathBuf>,
    /// Tasks, comma-separated: ifeval, gsm8k, gsm8k_cot, gsm8k_cot_zeroshot, chat, humaneval,
    /// humaneval_instruct, mbpp, mbpp_instruct, math500, bbh, mmlu, arc_challenge, hellaswag, gpqa
    /// (all but IFEval and GSM8K read their data files under --data-dir, from
    /// scripts/fetch-eval-data.sh)
    #[arg(long, value_delimiter = ',', value_name = "TASKS")]
    pub tasks: Vec<String>,
    /// IFEval's input_data.jsonl
    #[arg(long, default_value_os_t = crate::data_dir::data_path("ifeval/input_data.jsonl"), hide_short_help = true)]
    pub ifeval_data: PathBuf,
    /// GSM8K test.jsonl
    #[arg(long, default_value_os_t = crate::data_dir::data_path("gsm8k/test.jsonl"), hide_short_help = true)]
    pub gsm8k_data: PathBuf,
    /// Where the code, MATH and multiple-choice tasks read their data (DIR/humaneval/,
    /// DIR/mbpp/, DIR/math500/, DIR/bbh/, DIR/mmlu/, DIR/arc_challenge/, DIR/hellaswag/, DIR/gpqa/)
    #[arg(long, default_value_os_t = crate::data_dir::data_root(), value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Directory for each run's results log (runs resume from them)
    #[arg(long, default_value = "eval-runs", hide_short_help = true)]
    pub work: PathBuf,
    /// Also write everything (both reports with per-item results, the comparisons) to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Evaluate only the first N items of each task
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Context length in tokens (default: the model's maximum)
    #[arg(long, hide_short_help = true)]
    pub ctx: Option<usize>,
    /// Worker threads, at least 1 (default: one per physical core; more than the machine's
    /// CPUs is lowered to that count, with a note)
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Answers decoded together per step (1: one at a time)
    #[arg(long, default_value_t = 8, hide_short_help = true)]
    pub batch: usize,
    /// Run every prompt from its start instead of continuing from the cached state of the
    /// prompt it shares a beginning with (same answers and scores, slower; for measuring)
    #[arg(long, hide_short_help = true)]
    pub no_shared_prefix: bool,
    /// Run part K of N of every task (each task's items split as `pocket eval TASK --shard`
    /// does), its logs under --work; once every part's logs are in one --work, the command
    /// without --shard joins them and prints the one run's report
    #[arg(long, value_name = "K/N", value_parser = Shard::parse, hide_short_help = true)]
    pub shard: Option<Shard>,
    /// Speculative decoding for both builds (one answer at a time; the answers are --batch 1's)
    #[command(flatten)]
    pub spec: crate::speculate_args::SpecArgs,
}

pub(super) fn run_one(a: &DriftArgs, task: &str, i: usize, model: &Path) -> Result<Done> {
    let file = format!(
        "{task}.{}.{}.jsonl",
        i + 1,
        model_name(model).replace(
            |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '.',
            "_"
        )
    );
    let whole = a.work.join(file);
    let out = match a.shard {
        Some(shard) => super::parts::part_path(&whole, shard),
        None => {
            if let Some(n) = super::parts::join(&whole)? {
                eprintln!("{task}: joined {n} parts' logs into {}", whole.display());
            }
            whole
        }
    };
    let run = RunOpts {
        limit: a.limit,
        out: Some(out),
        shard: a.shard,
        json: false,
        ctx: a.ctx,
        threads: None,
        batch: a.batch,
        no_shared_prefix: a.no_shared_prefix,
        spec: a.spec.clone(),
    };
    if task == "ifeval" {
        return ifeval_run(&IfevalArgs {
            model: model.to_path_buf(),
            data: a.ifeval_data.clone(),
            raw: false,
            run,
        });
    }
    if let Some(code) = pocket_evals::code::tasks::CodeTask::parse(task) {
        let set = if code.is_mbpp() { "mbpp" } else { "humaneval" };
        return super::code::code_run(
            set,
            &super::code::CodeArgs {
                model: model.to_path_buf(),
                variant: Some(task.to_string()),
                problems: Some(a.data_dir.join(if set == "mbpp" {
                    "mbpp/test.jsonl"
                } else {
                    "humaneval/HumanEval.jsonl"
                })),
                samples: 1,
                temperature: 0.8,
                top_p: 0.95,
                seed: 0,
                timeout: 3.0,
                run,
            },
        );
    }
    if let Some(bench) = pocket_evals::mc::benchmarks::Benchmark::parse(task) {
        return super::mc::mc_run(&super::mc::McArgs {
            model: model.to_path_buf(),
            data: None,
            task: Some(bench),
            data_dir: a.data_dir.clone(),
            style: pocket_evals::mc::Style::Cloze,
            constrained: false,
            chat: false,
            run,
        });
    }
    if task == "bbh" {
        return super::bbh::bbh_run(&super::bbh::BbhArgs {
            model: model.to_path_buf(),
            data: a.data_dir.join("bbh"),
            subtasks: Vec::new(),
            run,
        });
    }
    if task == "math500" {
        return super::math::math_run(&super::math::MathArgs {
            model: model.to_path_buf(),
            data: a.data_dir.join("math500/test.jsonl"),
            run,
        });
    }
    let Some(variant) = Variant::parse(task) else {
        bail!(
            "--tasks: unknown task `{task}` ({})",
            known_tasks().join(", ")
        );
    };
    gsm8k_run(&Gsm8kArgs {
        model: model.to_path_buf(),
        variant,
        data: a.gsm8k_data.clone(),
        fewshot: None,
        run,
    })
}

/// The task names `--tasks` takes.
fn known_tasks() -> Vec<&'static str> {
    let mut names = vec!["ifeval"];
    names.extend(Variant::ALL.iter().map(|v| v.name()));
    names.extend(
        pocket_evals::code::tasks::CodeTask::ALL
            .iter()
            .map(|t| t.name()),
    );
    names.push("math500");
    names.push("bbh");
    names.extend(
        pocket_evals::mc::benchmarks::Benchmark::ALL
            .iter()
            .map(|b| b.name()),
    );
    names
}

pub fn main(a: DriftArgs) -> Result<ExitCode> {
    if a.models.len() != 2 || a.tasks.is_empty() {
        eprintln!("error: pocket eval without a subcommand compares two builds: --model A --model B --tasks ifeval,gsm8k_cot (see `pocket eval --help`)");
        return Ok(ExitCode::from(2));
    }
    for t in &a.tasks {
        if !known_tasks().contains(&t.as_str()) {
            bail!("--tasks: unknown task `{t}` ({})", known_tasks().join(", "));
        }
    }
    crate::term::set_threads(a.threads)?;
    std::fs::create_dir_all(&a.work).map_err(|e| anyhow::anyhow!("{}: {e}", a.work.display()))?;
    let mut rows = Vec::new();
    for task in &a.tasks {
        let mut done = Vec::new();
        for (i, m) in a.models.iter().enumerate() {
            eprintln!(
                "{task}: {} ({})",
                m.display(),
                if i == 0 { "A" } else { "B" }
            );
            done.push(run_one(&a, task, i, m)?);
        }
        if let Some(shard) = a.shard {
            for (d, m) in done.iter().zip(&a.models) {
                part_line(shard, task, d, m);
            }
            continue;
        }
        let files: Vec<RunFile> = done
            .iter()
            .zip(&a.models)
            .map(|(d, m)| RunFile {
                path: m.clone(),
                task: d.report.task.clone(),
                model: d.report.model.clone(),
                items: d.report.items.clone(),
            })
            .collect();
        let c = compare(&files[0], &files[1])?;
        rows.push((done, c));
    }
    if let Some(shard) = a.shard {
        println!("{}", part_done(shard, "eval"));
        return Ok(ExitCode::SUCCESS);
    }
    print_table(&a, &rows);
    if let Some(path) = &a.json {
        let tasks: Vec<_> = rows
            .iter()
            .map(|(done, c)| {
                json!({
                    "task": c.task,
                    "runs": [&done[0].report, &done[1].report],
                    "comparison": c,
                })
            })
            .collect();
        let all = json!({"models": a.models, "limit": a.limit, "tasks": tasks});
        pocket_formats::atomic::write_atomic(path, serde_json::to_string_pretty(&all)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// A part's line for one task and build: what it logged, not a score (a part's items are not
/// the run's).
pub(super) fn part_line(shard: Shard, task: &str, d: &Done, model: &Path) {
    println!(
        "part {shard}: {task} on {}: {} items logged",
        model.display(),
        d.report.n
    );
}

/// What a part says when it is done: how its logs become the one run's report.
pub(super) fn part_done(shard: Shard, command: &str) -> String {
    format!(
        "part {shard} done. With every part's --work logs in one directory, the same `pocket \
         {command}` command without --shard joins them and prints the one run's report"
    )
}

fn print_table(a: &DriftArgs, rows: &[(Vec<Done>, Comparison)]) {
    println!(
        "A = {} (baseline), B = {}",
        a.models[0].display(),
        a.models[1].display()
    );
    println!(
        "{:<20} {:<26} {:>6} {:>8} {:>8} {:>7}  {:<17} {:>9}",
        "task", "metric", "n", "A", "B", "B−A", "95% CI of B−A", "McNemar p"
    );
    for (done, c) in rows {
        for name in done[0].order {
            let Some(m) = c.metrics.iter().find(|m| m.metric == *name) else {
                continue;
            };
            let ci = m
                .ci95
                .map(|(lo, hi)| format!("[{:+.2}, {:+.2}]", 100.0 * lo, 100.0 * hi))
                .unwrap_or_else(|| "–".into());
            println!(
                "{:<20} {:<26} {:>6} {:>8.2} {:>8.2} {:>+7.2}  {:<17} {:>9.3}",
                c.task,
                m.metric,
                m.units,
                100.0 * m.a,
                100.0 * m.b,
                100.0 * m.diff,
                ci,
                m.mcnemar_p
            );
        }
    }
    println!("(scores in points; a difference whose interval contains 0 is within noise for this many items)");
}
