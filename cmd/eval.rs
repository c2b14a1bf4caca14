//! `pocket eval`: quality measurements. `ppl` (perplexity, and the drift of a build from a
//! baseline on the same tokens), `ifeval`, `gsm8k` and `mc` (tasks scored as
//! lm-evaluation-harness scores them), `score` (an existing responses file, no model) and
//! `compare` (two runs of one task: scores, flips, significance).
//!
//! Task runs are resumable: with `--out FILE`, every finished item is appended to FILE as one
//! JSON line; running the same command again skips the items already there.

mod bbh;
mod code;
mod compare;
mod custom;
mod decide;
mod drift;
pub(crate) mod engine;
mod generation;
mod math;
mod mc;
mod merge;
mod parts;
mod ppl;
mod suite;

use anyhow::Result;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pocket_evals::results::{ItemScores, RunReport};
use pocket_evals::runlog::{Logged, RunLog};
use pocket_evals::shards::{Part, Shard};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
Task runs (ifeval, gsm8k, mc) decode greedily and can be resumed: with --out FILE each finished \
item is appended to FILE as one JSON line, and the same command run again skips those items \
and reports the same scores as an uninterrupted run.

Exit codes: 0 success, 1 bad input or failure, 2 bad usage.

Examples:
  pocket eval gsm8k models/smollm2-135m-instruct --variant gsm8k_cot --limit 50 --out a.jsonl
  pocket eval gsm8k smol-q4.pocket --variant gsm8k_cot --limit 50 --out b.jsonl
  pocket eval compare a.jsonl b.jsonl
  pocket eval ifeval MODEL --out responses.jsonl --json > ifeval.json
  pocket eval score ifeval --responses responses.jsonl
  pocket eval mc MODEL --data questions.csv --style letters
  pocket eval --model models/smollm2-135m-instruct --model smol-q4.pocket --tasks ifeval,gsm8k_cot \
      --limit 100 --json drift.json")]
#[command(args_conflicts_with_subcommands = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub task: Option<Task>,
    /// Without a subcommand: evaluate two builds on the same items and print the drift
    #[command(flatten)]
    pub drift: drift::DriftArgs,
}

#[derive(Subcommand)]
pub enum Task {
    /// Perplexity on a text, and KL from a baseline build
    ///
    /// Perplexity of MODEL on a text; with --baseline, also the mean KL divergence from the
    /// baseline's next-token distribution and top-1 agreement, on the same tokens
    Ppl(ppl::PplArgs),
    /// IFEval instruction following, scored as lm-eval 0.4.13
    ///
    /// IFEval instruction following: 541 prompts through the chat template, scored exactly as
    /// lm-eval 0.4.13
    Ifeval(generation::IfevalArgs),
    /// GSM8K grade-school math (lm-eval's variants)
    ///
    /// GSM8K grade-school math, as lm-eval's gsm8k / gsm8k_cot / gsm8k_cot_zeroshot /
    /// gsm8k_cot_llama (chat) tasks
    Gsm8k(generation::Gsm8kArgs),
    /// HumanEval code generation, run against its tests in a sandbox
    ///
    /// HumanEval code generation, checked by running each completion against its tests in a
    /// sandbox (lm-eval's humaneval / humaneval_instruct prompts; pass@1, pass@k)
    Humaneval(code::CodeArgs),
    /// MBPP code generation, run against its tests in a sandbox
    ///
    /// MBPP code generation (lm-eval's 3-shot mbpp prompt), checked by execution in a sandbox
    Mbpp(code::CodeArgs),
    /// MATH-500 competition math (lm-eval's minerva_math500)
    ///
    /// MATH-500 (lm-eval's minerva_math500: 4-shot, the final-answer sentence, normalised
    /// exact match; string equivalence only, the sympy path is not ported)
    Math500(math::MathArgs),
    /// BIG-Bench Hard, 27 tasks with chain of thought
    ///
    /// BIG-Bench Hard, 27 tasks with chain of thought (lm-eval's bbh_cot_fewshot prompts,
    /// answer filter and exact match)
    Bbh(bbh::BbhArgs),
    /// Your own task, from a YAML/JSON task file
    ///
    /// Your own samples as a task: a YAML/JSON task file (data, prompt template, answer
    /// extraction, metric), on one build or two (--model B) with the paired comparison
    Custom(custom::CustomArgs),
    /// The model card's benchmark suite in one command
    ///
    /// The model card's benchmark suite in one command: per-task scores, the unweighted
    /// average, and with --model B the paired differences (IFEval-zh, C-Eval and CMMLU have
    /// no data here; the table says so)
    Suite(suite::SuiteArgs),
    /// System One decisions on labelled rows: accuracy and calibration
    ///
    /// System One decisions on labelled rows (choice, noul, score): accuracy, log loss, Brier
    /// score and calibration error of `pocket decide`'s readout
    Decide(decide::DecideEvalArgs),
    /// Multiple choice: your questions, MMLU, ARC, HellaSwag, GPQA
    ///
    /// Multiple choice by log-likelihood (acc, acc_norm) on your CSV or JSONL questions, or
    /// MMLU, ARC-Challenge, HellaSwag and GPQA with lm-eval's prompts (--task)
    Mc(mc::McArgs),
    /// Score an existing responses file without a model
    #[command(subcommand)]
    Score(compare::ScoreTask),
    /// Join the logs of a run's parts (--shard K/N) into the one run's report
    ///
    /// Join the --out logs of a run's parts (each run with --shard K/N, on one machine or
    /// many) into the report one run gives: the same items in the same order, bit for bit the
    /// same scores; with --out, the one run's log
    Merge(merge::MergeArgs),
    /// Compare two runs of the same task, with a paired bootstrap interval
    ///
    /// Compare two runs of the same task (e.g. bf16 vs Q4): both scores, the difference with a
    /// 95% paired bootstrap interval, the items that flipped each way, McNemar's exact test
    Compare(compare::CompareArgs),
}

pub fn main(args: EvalArgs) -> Result<ExitCode> {
    let Some(task) = args.task else {
        return drift::main(args.drift);
    };
    match task {
        Task::Ppl(a) => ppl::main(a),
        Task::Ifeval(a) => generation::ifeval(a),
        Task::Gsm8k(a) => generation::gsm8k(a),
        Task::Humaneval(a) => code::generate("humaneval", a),
        Task::Mbpp(a) => code::generate("mbpp", a),
        Task::Math500(a) => math::main(a),
        Task::Bbh(a) => bbh::main(a),
        Task::Custom(a) => custom::main(a),
        Task::Suite(a) => suite::main(a),
        Task::Mc(a) => mc::main(a),
        Task::Decide(a) => decide::main(a),
        Task::Score(a) => compare::score(a),
        Task::Merge(a) => merge::main(a),
        Task::Compare(a) => compare::main(a),
    }
}

/// How a generation task decodes its answers (see [`RunOpts::batching`]).
#[derive(Clone, Copy)]
pub struct Batching {
    pub size: usize,
    pub share_prefix: bool,
}

/// Options every task run shares.
#[derive(Args)]
pub struct RunOpts {
    /// Evaluate only the first N items
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Append each finished item to FILE (JSON lines) and skip the items already in it
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Run part K of N: item i (counted after --limit) is part i mod N + 1's. Give each part
    /// its own --out; `pocket eval merge` joins the parts' logs into the one run's report
    #[arg(long, value_name = "K/N", value_parser = Shard::parse)]
    pub shard: Option<Shard>,
    /// Print one JSON report (scores, settings, per-item scores) instead of text
    #[arg(long)]
    pub json: bool,
    /// Context length in tokens (default: the model's maximum)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Worker threads, at least 1 (default: one per physical core; more than the machine's
    /// CPUs is lowered to that count, with a note)
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Generation tasks: answers decoded together per step (1: one at a time). Batched answers
    /// equal single ones up to the summation order of the batched kernels
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub batch: usize,
    /// Run every prompt from its start instead of continuing from the cached state of the
    /// prompt it shares a beginning with (few-shot examples; MMLU's per subject): the same
    /// scores and answers, slower; for measuring
    #[arg(long)]
    pub no_shared_prefix: bool,
    /// Generation tasks: speculative decoding (one answer at a time: --batch is then 1). The
    /// answers are those of --batch 1 without it, token for token
    #[command(flatten)]
    pub spec: crate::speculate_args::SpecArgs,
}

impl RunOpts {
    /// Answers decoded together: --batch, or 1 under speculation (which pays one answer at a
    /// time: a batch already fills the kernels' rows).
    pub fn generation_batch(&self) -> usize {
        if self.spec.on() {
            1
        } else {
            self.batch
        }
    }

    /// How generation tasks batch: [`Self::generation_batch`] answers at a time, and whether
    /// a batch's prompts share their cached beginnings.
    pub fn batching(&self) -> Batching {
        Batching {
            size: self.generation_batch(),
            share_prefix: !self.no_shared_prefix,
        }
    }

    pub fn start_threads(&self) -> Result<()> {
        crate::term::set_threads(self.threads)
    }

    /// The run's items: the first --limit of `items`, then this part's under --shard, and
    /// the part its log records.
    pub fn select<T>(&self, items: Vec<T>) -> (Vec<T>, Option<Part>) {
        self.split(self.limit(items))
    }

    /// The first --limit of `items` (the whole run's, before --shard).
    pub fn limit<T>(&self, mut items: Vec<T>) -> Vec<T> {
        if let Some(n) = self.limit {
            items.truncate(n as usize);
        }
        items
    }

    /// This part's share of the run's `items` under --shard (all of them without), and the
    /// part its log records.
    pub fn split<T>(&self, items: Vec<T>) -> (Vec<T>, Option<Part>) {
        match self.shard {
            Some(shard) => {
                let part = Part::new(shard, items.len(), 1);
                (shard.pick(items), Some(part))
            }
            None => (items, None),
        }
    }
}

/// How a run names its model in logs and reports: the file or directory name, so moving a
/// model does not break resuming.
pub fn model_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A progress bar on stderr, hidden for --json and when stderr is not a terminal.
pub fn progress(len: usize, unit: &str, hidden: bool) -> ProgressBar {
    if hidden || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit} {{msg}} ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The items of an earlier run, read back from `--out`, and the log new items go to.
pub struct Resume {
    log: Option<RunLog>,
    done: HashMap<String, Logged>,
    identity: Map<String, Value>,
    /// Under --shard: each record says which part wrote it and the item's place in the run.
    part: Option<Part>,
    pub resumed: usize,
}

fn id_key(id: &Value) -> String {
    id.to_string()
}

impl Resume {
    /// `identity` (task, model, settings) goes into every record and must match the file's.
    /// `part` is [`RunOpts::select`]'s.
    pub fn open(
        out: Option<&Path>,
        identity: Map<String, Value>,
        part: Option<Part>,
    ) -> Result<Resume> {
        let (log, done) = match out {
            Some(path) => {
                let (log, records) = RunLog::open(path, &identity)?;
                let done = records
                    .into_iter()
                    .map(|l| (id_key(l.record.get("id").unwrap_or(&Value::Null)), l))
                    .collect();
                (Some(log), done)
            }
            None => (None, HashMap::new()),
        };
        Ok(Resume {
            log,
            done,
            identity,
            part,
            resumed: 0,
        })
    }

    /// The logged record of item `id`, if it was finished; its `fields` must equal the item's
    /// (the data file has not changed under the log).
    pub fn finished(
        &mut self,
        id: &Value,
        fields: &Map<String, Value>,
    ) -> Result<Option<Map<String, Value>>> {
        let Some(logged) = self.done.get(&id_key(id)) else {
            return Ok(None);
        };
        for (k, v) in fields {
            if logged.record.get(k) != Some(v) {
                let path = self.log.as_ref().map(|l| l.path().display().to_string());
                anyhow::bail!(
                    "{}:{}: item {id} has a different {k} than the data: written from another data file? Use another --out",
                    path.unwrap_or_default(),
                    logged.line
                );
            }
        }
        self.resumed += 1;
        Ok(Some(logged.record.clone()))
    }

    /// Appends a finished item, the run's `pos`-th: identity, then `fields`, then `result`
    /// (and under --shard, the part and the item's place in the whole run).
    pub fn append(
        &mut self,
        pos: usize,
        id: &Value,
        fields: &Map<String, Value>,
        result: Map<String, Value>,
    ) -> Result<()> {
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        let mut record = self.identity.clone();
        record.insert("id".into(), id.clone());
        record.extend(fields.clone());
        record.extend(result);
        if let Some(part) = &self.part {
            record.insert(
                pocket_evals::shards::KEY.into(),
                part.tag(pos, &self.identity),
            );
        }
        log.append(&record)?;
        Ok(())
    }
}

/// A JSON object literal as a map (non-objects give an empty map).
pub fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The report of a task run, with `details` for --json.
pub fn report(
    task: &str,
    model: &str,
    items: Vec<ItemScores>,
    details: Value,
) -> Result<RunReport> {
    Ok(RunReport {
        task: task.to_string(),
        model: model.to_string(),
        n: items.len(),
        metrics: pocket_evals::results::summarize(&items)?,
        details,
        items,
    })
}

/// Text lines for a report's metrics: `name  value ± stderr`.
pub fn print_metrics(report: &RunReport, order: &[&str]) {
    for name in order {
        if let Some(m) = report.metrics.get(*name) {
            let err = m.stderr.map(|s| format!(" ± {:.4}", s)).unwrap_or_default();
            println!("  {name:<26} {:.4}{err}  ({} units)", m.value, m.units);
        }
    }
}
