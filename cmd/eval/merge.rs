//! `pocket eval merge PART.jsonl…`: the --out logs of a run's parts (`--shard K/N`, run on
//! one machine or many) joined into the report one run gives (the evals crate's `shards`
//! checks that they are one run's and that no item is missing or doubled), and with --out
//! into the one run's log.

use super::print_metrics;
use anyhow::{bail, Result};
use clap::Args;
use pocket_evals::shards;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
Every part of the run must be given, each item must be in exactly one log, and the logs must \
come from the same command (task, model and settings); otherwise merge names the file and line \
and writes nothing. The report is the one run's: the items in the data's order, bit for bit the \
same scores. For a task's own details (pass@k, IFEval's per-instruction table), run the task's \
command without --shard on the merged log (--out): it finds every item done, generates nothing \
and prints that run's whole report.

Example (two parts; on two machines, or any job runner: docs/evals.md has a Ray job):
  pocket eval gsm8k MODEL --limit 200 --shard 1/2 --out part1.jsonl
  pocket eval gsm8k MODEL --limit 200 --shard 2/2 --out part2.jsonl
  pocket eval merge part1.jsonl part2.jsonl --out gsm8k.jsonl")]
pub struct MergeArgs {
    /// The parts' --out logs
    #[arg(required = true, value_name = "PART_LOG")]
    pub logs: Vec<PathBuf>,
    /// Also write the one run's log to FILE (a new file: an existing one is not replaced)
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the report as one JSON object (the task's --json shape) instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: MergeArgs) -> Result<ExitCode> {
    if let Some(out) = &a.out {
        if out.exists() {
            bail!(
                "{}: exists; merge writes a new log (remove it or name another --out)",
                out.display()
            );
        }
    }
    let mut files = Vec::with_capacity(a.logs.len());
    for path in &a.logs {
        if files.iter().any(|(p, _)| p == path) {
            bail!("{}: given twice", path.display());
        }
        files.push((path.clone(), pocket_evals::runlog::read(path)?));
    }
    let merged = shards::merge(&files)?;
    if let Some(out) = &a.out {
        super::parts::write_log(out, &merged.records)?;
    }
    let r = &merged.report;
    if a.json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        println!(
            "{} on {}: {} items from {} parts{}",
            r.task,
            r.model,
            r.n,
            merged.parts,
            a.out
                .as_ref()
                .map(|o| format!("; the one run's log is {}", o.display()))
                .unwrap_or_default()
        );
        let names: Vec<&str> = r.metrics.keys().map(String::as_str).collect();
        print_metrics(r, &names);
    }
    Ok(ExitCode::SUCCESS)
}
