//! `pocket eval math500`: MATH-500 generated as lm-eval 0.4.13's `minerva_math500` prompts it
//! and scored by the evals crate's port of its answer normalisation (string path only).

use super::generation::{check_data, open_model, resumed_note, run_items, speed, Done, GenItem};
use super::{model_name, obj, report, Resume, RunOpts};
use anyhow::Result;
use clap::Args;
use pocket_evals::math;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(after_help = "\
Scored as lm-eval 0.4.13's minerva_math500 `exact_match`, string path only: an answer that equals \
the gold only after sympy's LaTeX parsing and simplification counts as wrong here (the reference \
tries that next), and `math_verify` is not computed. The score is a lower bound of lm-eval's.")]
pub struct MathArgs {
    /// Model: an HF checkpoint directory, a .pocket file or a GGUF
    pub model: PathBuf,
    /// MATH-500 as {\"problem\", \"solution\"} lines (scripts/fetch-eval-data.sh puts it here)
    #[arg(long, default_value_os_t = crate::data_dir::data_path("math500/test.jsonl"))]
    pub data: PathBuf,
    #[command(flatten)]
    pub run: RunOpts,
}

pub fn main(a: MathArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    math_run(&a)?.print(a.run.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs MATH-500 (threads already set).
pub fn math_run(a: &MathArgs) -> Result<Done> {
    check_data(&a.data)?;
    // Numbered before --shard picks: an item's id is its row, whichever part runs it.
    let (problems, part) = a.run.select(
        math::load_problems(&a.data)?
            .into_iter()
            .enumerate()
            .collect(),
    );
    let (m, ctx) = open_model(&a.model, &a.run, false)?;
    let model = model_name(&a.model);
    let identity = json!({"task": "minerva_math500", "model": model});
    let mut resume = Resume::open(a.run.out.as_deref(), obj(identity), part)?;
    let mut items = Vec::with_capacity(problems.len());
    for (i, p) in &problems {
        items.push(GenItem {
            id: json!(i),
            fields: obj(json!({"problem": p.problem})),
            request: math::request(&p.problem)?,
        });
    }
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
            let (row, p) = &problems[i];
            let v = math::score(response, &p.solution);
            let scores = pocket_evals::results::ItemScores {
                id: json!(row),
                scores: [("exact_match".to_string(), json!(v.exact_match as u8))].into(),
                instruction_id_list: None,
            };
            (scores, obj(json!({"answer": v.answer, "gold": v.gold})))
        },
    )?;
    let details = json!({
        "data": a.data,
        "num_fewshot": 4,
        "until": ["Problem:"],
        "max_gen_toks": 256,
        "equivalence": "string (sympy path not ported)",
        "resumed": resume.resumed,
        "generated_tokens": engine.generated_tokens,
        "prompt_tokens": engine.prompt_tokens,
        "prompt_tokens_run": engine.prompt_tokens_run,
        "seconds": start.elapsed().as_secs_f64(),
    });
    let r = report("minerva_math500", &model, scored, details)?;
    let header = format!(
        "minerva_math500 on {model}: {} problems (4-shot, greedy, max 256 tokens; string equivalence){}",
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
