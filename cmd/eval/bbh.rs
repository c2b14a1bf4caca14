//! `pocket eval bbh`: BIG-Bench Hard with chain of thought, as lm-eval 0.4.13's
//! `bbh_cot_fewshot` prompts, decodes and scores it (the prompts and the answer filter are the
//! evals crate's `bbh`).

use super::generation::{open_model, resumed_note, run_items, speed, Done, GenItem};
use super::{model_name, obj, report, Resume, RunOpts};
use anyhow::{bail, Result};
use clap::Args;
use pocket_evals::bbh;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(after_help = "\
lm-eval 0.4.13's bbh_cot_fewshot: per task its description and three worked exemplars, greedy \
until \"</s>\", \"Q\" or a blank line (1,024 tokens), the text after \"the answer is \" compared \
exactly with the target. --limit counts per task, as lm-eval's. The score is the mean over all \
items (lm-eval's group average weighted by size); per-task scores are in the --json report's items. \
Data: scripts/fetch-eval-data.sh (6,511 items of 27 tasks).")]
pub struct BbhArgs {
    /// Model: an HF checkpoint directory, a .pocket file or a GGUF
    pub model: PathBuf,
    /// Directory of the 27 tasks' <task>.jsonl files ({"input", "target"} lines)
    #[arg(long, default_value_os_t = crate::data_dir::data_path("bbh"), value_name = "DIR")]
    pub data: PathBuf,
    /// Only these tasks, comma-separated (e.g. date_understanding,navigate; default: all 27)
    #[arg(long, value_delimiter = ',', value_name = "TASKS")]
    pub subtasks: Vec<String>,
    #[command(flatten)]
    pub run: RunOpts,
}

pub fn main(a: BbhArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    bbh_run(&a)?.print(a.run.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs BBH (threads already set).
pub fn bbh_run(a: &BbhArgs) -> Result<Done> {
    if !a.data.is_dir() {
        bail!(
            "{}: no such directory (scripts/fetch-eval-data.sh downloads BBH; or give --data)",
            a.data.display()
        );
    }
    let spec = bbh::spec()?;
    let questions = bbh::load(&spec, &a.data, &a.subtasks, a.run.limit.map(|n| n as usize))?;
    // --limit counts per task (bbh::load's); --shard splits what it leaves.
    let (questions, part) = a.run.split(questions);
    let (m, ctx) = open_model(&a.model, &a.run, false)?;
    let model = model_name(&a.model);
    let identity = json!({"task": "bbh_cot_fewshot", "model": model});
    let mut resume = Resume::open(a.run.out.as_deref(), obj(identity), part)?;
    let items: Vec<GenItem> = questions
        .iter()
        .map(|q| GenItem {
            id: json!(format!("{}/{}", q.task, q.index)),
            fields: obj(json!({"input": q.sample.input, "target": q.sample.target})),
            request: spec.tasks[&q.task].request(&spec, &q.sample.input),
        })
        .collect();
    let mut engine = super::engine::Engine::new(&m, ctx);
    let start = Instant::now();
    let scored = run_items(
        &mut engine,
        &mut resume,
        &items,
        a.run.batching(),
        a.run.json,
        "exact_match",
        |i, response| {
            let q = &questions[i];
            let answer = bbh::answer(response);
            let right = bbh::is_correct(response, &q.sample.target);
            let scores = pocket_evals::results::ItemScores {
                id: items[i].id.clone(),
                scores: [("exact_match".to_string(), json!(right as u8))].into(),
                instruction_id_list: None,
            };
            (scores, obj(json!({"answer": answer, "subtask": q.task})))
        },
    )?;
    let details = json!({
        "data": a.data,
        "num_fewshot": spec.num_fewshot,
        "until": spec.until,
        "max_gen_toks": spec.max_gen_toks,
        "resumed": resume.resumed,
        "generated_tokens": engine.generated_tokens,
        "prompt_tokens": engine.prompt_tokens,
        "prompt_tokens_run": engine.prompt_tokens_run,
        "seconds": start.elapsed().as_secs_f64(),
    });
    let r = report("bbh_cot_fewshot", &model, scored, details)?;
    let header = format!(
        "bbh_cot_fewshot on {model}: {} questions (3-shot chain of thought, greedy){}",
        r.n,
        resumed_note(&resume, &a.run)
    );
    Ok(Done {
        report: r,
        header,
        order: &["exact_match"],
        speed: speed(&engine, start),
    })
}
