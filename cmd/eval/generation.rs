//! `pocket eval ifeval` and `pocket eval gsm8k`: greedy generation tasks. Prompts, stop strings
//! and lengths come from the evals crate (lm-eval's definitions); this file loads the data,
//! drives the engine item by item with resume and progress, and prints the report.

use super::engine::Engine;
use super::{model_name, obj, print_metrics, progress, report, Batching, Resume, RunOpts};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use pocket::loader::LoadedModel;
use pocket_evals::gsm8k::{self, Exemplar, Task, Variant};
use pocket_evals::ifeval::{self, IfevalItem, ItemVerdict};
use pocket_evals::results::ItemScores;
use pocket_evals::results::RunReport;
use pocket_evals::{ChatMessage, GenRequest, Prompt, TextGenerator};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// lm-eval's `ifeval.yaml`: `max_gen_toks: 1280`, no stop strings.
const IFEVAL_MAX_GEN_TOKS: usize = 1280;

#[derive(Args)]
pub struct IfevalArgs {
    /// Model: an HF checkpoint directory or a .pocket file
    pub model: PathBuf,
    /// IFEval's input_data.jsonl (scripts/fetch-eval-data.sh puts it here)
    #[arg(long, default_value_os_t = crate::data_dir::data_path("ifeval/input_data.jsonl"))]
    pub data: PathBuf,
    /// Send each prompt as plain text instead of through the chat template (lm-eval without
    /// --apply_chat_template; for base models)
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

#[derive(Args)]
pub struct Gsm8kArgs {
    /// Model: an HF checkpoint directory or a .pocket file
    pub model: PathBuf,
    /// gsm8k (5-shot, "#### N"), gsm8k_cot (8-shot chain of thought), gsm8k_cot_zeroshot, or
    /// chat (lm-eval's gsm8k_cot_llama: 8 exemplars as chat turns through the chat template)
    #[arg(long, default_value = "gsm8k", value_parser = parse_variant)]
    pub variant: Variant,
    /// GSM8K test.jsonl (scripts/fetch-eval-data.sh puts it here)
    #[arg(long, default_value_os_t = crate::data_dir::data_path("gsm8k/test.jsonl"))]
    pub data: PathBuf,
    /// For --variant gsm8k: GSM8K train rows whose first 5 are the exemplars [default: the
    /// gsm8k_cot exemplars written as "...\n#### N"]
    #[arg(long, value_name = "FILE")]
    pub fewshot: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunOpts,
}

fn parse_variant(s: &str) -> Result<Variant, String> {
    Variant::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

/// One item to generate for: its id, the data fields written with it (and checked when
/// resuming), and the request.
pub(super) struct GenItem {
    pub id: Value,
    pub fields: Map<String, Value>,
    pub request: GenRequest,
}

pub(super) fn open_model(
    path: &Path,
    run: &RunOpts,
    needs_template: bool,
) -> Result<(LoadedModel, usize)> {
    let (m, _) = crate::settings::open_model(path, crate::settings::load_options(true)?)?;
    if needs_template && m.template.is_none() {
        bail!(
            "{}: the model has no chat template (for IFEval use --raw to send plain prompts)",
            path.display()
        );
    }
    let max = m.model.spec.max_position_embeddings;
    let ctx = run.ctx.unwrap_or(max).min(max);
    if ctx == 0 {
        bail!("--ctx must be at least 1");
    }
    Ok((m, ctx))
}

/// Generates for every item not yet in the log and scores every item. `score` returns the
/// item's scores and the extra fields its log line carries besides `response`.
pub(super) fn run_items(
    engine: &mut Engine,
    resume: &mut Resume,
    items: &[GenItem],
    batching: Batching,
    hidden: bool,
    headline: &str,
    mut score: impl FnMut(usize, &str) -> (ItemScores, Map<String, Value>),
) -> Result<Vec<ItemScores>> {
    let bar = progress(items.len(), "items", hidden);
    let mut scored: Vec<Option<ItemScores>> = (0..items.len()).map(|_| None).collect();
    let mut right = 0usize;
    let mut finished = 0usize;
    // Items already in the log are scored from it; the rest are generated.
    let mut todo = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match resume.finished(&item.id, &item.fields)? {
            Some(rec) => match rec.get("response").and_then(Value::as_str) {
                Some(r) => scored[i] = Some(score(i, r).0),
                None => bail!("--out: item {} was logged without a response", item.id),
            },
            None => todo.push(i),
        }
    }
    let tally = |s: &ItemScores, right: &mut usize, finished: &mut usize| {
        *right += usize::from(
            s.scores
                .get(headline)
                .and_then(pocket_evals::results::units)
                .is_some_and(|u| u.iter().all(|&b| b)),
        );
        *finished += 1;
        bar.set_message(format!(
            "{headline} {:.1}%",
            100.0 * *right as f64 / *finished as f64
        ));
        bar.inc(1);
    };
    for s in scored.iter().flatten() {
        tally(s, &mut right, &mut finished);
    }
    // A finished answer is scored and logged at once, so a killed run loses nothing done.
    let mut record = |i: usize, response: String| -> Result<ItemScores> {
        let (scores, extra) = score(i, &response);
        let mut result = Map::new();
        result.insert("response".into(), Value::from(response));
        result.extend(extra);
        result.insert("scores".into(), json!(scores.scores));
        resume.append(i, &items[i].id, &items[i].fields, result)?;
        Ok(scores)
    };
    // Constrained answers decode one at a time (the batch path has no token masks).
    let constrained = items.iter().any(|it| it.request.constraint.is_some());
    if batching.size <= 1 || constrained {
        for &i in &todo {
            let r = engine
                .generate(&items[i].request)
                .map_err(|e| anyhow!("item {}: {e}", items[i].id))?;
            let s = record(i, r)?;
            tally(&s, &mut right, &mut finished);
            scored[i] = Some(s);
        }
    } else {
        let reqs: Vec<&GenRequest> = todo.iter().map(|&i| &items[i].request).collect();
        let mut failed: Option<anyhow::Error> = None;
        engine
            .generate_queue(&reqs, batching, |k, r| {
                let i = todo[k];
                match record(i, r) {
                    Ok(s) => {
                        tally(&s, &mut right, &mut finished);
                        scored[i] = Some(s);
                        Ok(())
                    }
                    Err(e) => {
                        failed = Some(e);
                        Err("could not log the item".into())
                    }
                }
            })
            .map_err(|e| failed.take().unwrap_or_else(|| anyhow!("generating: {e}")))?;
    }
    let out: Vec<ItemScores> = scored
        .into_iter()
        .map(|s| s.expect("every item scored"))
        .collect();
    bar.finish_and_clear();
    Ok(out)
}

/// A finished task run: its report and what a terminal user is shown.
pub struct Done {
    pub report: RunReport,
    pub header: String,
    pub order: &'static [&'static str],
    pub speed: Option<String>,
}

impl Done {
    pub fn print(&self, json: bool) -> Result<()> {
        if json {
            println!("{}", serde_json::to_string(&self.report)?);
        } else {
            println!("{}", self.header);
            print_metrics(&self.report, self.order);
            if let Some(s) = &self.speed {
                println!("{s}");
            }
        }
        Ok(())
    }
}

pub const IFEVAL_METRICS: &[&str] = &[
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
];
pub const GSM8K_METRICS: &[&str] = &["strict_match", "flexible_extract"];

pub fn ifeval(a: IfevalArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    ifeval_run(&a)?.print(a.run.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn gsm8k(a: Gsm8kArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    gsm8k_run(&a)?.print(a.run.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs IFEval (threads already set).
pub fn ifeval_run(a: &IfevalArgs) -> Result<Done> {
    check_data(&a.data)?;
    let (items, part) = a.run.select(ifeval::load_inputs(&a.data)?);
    let (m, ctx) = open_model(&a.model, &a.run, !a.raw)?;
    let model = model_name(&a.model);
    let identity = json!({"task": "ifeval", "model": model, "chat_template": !a.raw});
    let mut resume = Resume::open(a.run.out.as_deref(), obj(identity), part)?;
    let requests: Vec<GenItem> = items
        .iter()
        .map(|it| GenItem {
            id: json!(it.key),
            fields: obj(json!({"key": it.key, "prompt": it.prompt})),
            request: GenRequest {
                prompt: if a.raw {
                    Prompt::Text(it.prompt.clone())
                } else {
                    Prompt::Chat(vec![ChatMessage::new("user", &it.prompt)])
                },
                until: Vec::new(),
                max_gen_toks: IFEVAL_MAX_GEN_TOKS,
                sampling: None,
                constraint: None,
            },
        })
        .collect();
    let draft = a
        .run
        .spec
        .load_draft(&m, crate::settings::load_options(true)?)?;
    let mut engine = Engine::new(&m, ctx);
    engine.speculate = a.run.spec.speculator(&m, draft.as_ref(), ctx);
    let start = Instant::now();
    let mut verdicts: Vec<(&IfevalItem, ItemVerdict)> = Vec::new();
    let scored = run_items(
        &mut engine,
        &mut resume,
        &requests,
        a.run.batching(),
        a.run.json,
        "prompt_level_strict_acc",
        |i, response| {
            let it = &items[i];
            let v = ifeval::score_response(it, response);
            let scores = ifeval::item_scores(it.key, &it.instruction_ids, &v.strict, &v.loose);
            verdicts.push((it, v));
            let extra = obj(json!({"instruction_id_list": it.instruction_ids}));
            (scores, extra)
        },
    )?;
    let table = ifeval::Report::new(&verdicts);
    let details = json!({
        "data": a.data,
        "chat_template": !a.raw,
        "max_gen_toks": IFEVAL_MAX_GEN_TOKS,
        "resumed": resume.resumed,
        "generated_tokens": engine.generated_tokens,
        "prompt_tokens": engine.prompt_tokens,
        "prompt_tokens_run": engine.prompt_tokens_run,
        "seconds": start.elapsed().as_secs_f64(),
        "per_instruction": table.per_instruction,
    });
    let r = report("ifeval", &model, scored, details)?;
    let header = format!(
        "ifeval on {model}: {} prompts ({}greedy, max {IFEVAL_MAX_GEN_TOKS} tokens){}",
        r.n,
        if a.raw {
            "plain prompts, "
        } else {
            "chat template, "
        },
        resumed_note(&resume, &a.run)
    );
    Ok(Done {
        report: r,
        header,
        order: IFEVAL_METRICS,
        speed: speed(&engine, start),
    })
}

/// Runs one GSM8K variant (threads already set).
pub fn gsm8k_run(a: &Gsm8kArgs) -> Result<Done> {
    let task = Task::get(a.variant)?;
    check_data(&a.data)?;
    // Numbered before --shard picks: an item's id is its row, whichever part runs it.
    let (problems, part) = a.run.select(
        gsm8k::load_problems(&a.data)?
            .into_iter()
            .enumerate()
            .collect(),
    );
    let (exemplars, fewshot_source) = gsm8k_exemplars(a, task)?;
    let (m, ctx) = open_model(&a.model, &a.run, a.variant == Variant::Chat)?;
    let model = model_name(&a.model);
    let name = task.lm_eval_name().to_string();
    let identity = json!({"task": name, "model": model, "fewshot": fewshot_source});
    let mut resume = Resume::open(a.run.out.as_deref(), obj(identity), part)?;
    let requests: Vec<GenItem> = problems
        .iter()
        .map(|(i, p)| GenItem {
            id: json!(i),
            fields: obj(json!({"question": p.question, "answer": p.answer})),
            request: task.request(&p.question, &exemplars),
        })
        .collect();
    let draft = a
        .run
        .spec
        .load_draft(&m, crate::settings::load_options(true)?)?;
    let mut engine = Engine::new(&m, ctx);
    engine.speculate = a.run.spec.speculator(&m, draft.as_ref(), ctx);
    let start = Instant::now();
    let scored = run_items(
        &mut engine,
        &mut resume,
        &requests,
        a.run.batching(),
        a.run.json,
        "flexible_extract",
        |i, response| {
            let (row, p) = &problems[i];
            let v = task.score(response, &p.answer);
            let extra = obj(json!({"strict": v.strict, "flexible": v.flexible}));
            (v.item_scores(json!(row)), extra)
        },
    )?;
    let details = json!({
        "variant": a.variant.name(),
        "data": a.data,
        "num_fewshot": task.num_fewshot(),
        "fewshot": fewshot_source,
        "chat_template": a.variant == Variant::Chat,
        "until": task.until(),
        "max_gen_toks": task.max_gen_toks(),
        "resumed": resume.resumed,
        "generated_tokens": engine.generated_tokens,
        "prompt_tokens": engine.prompt_tokens,
        "prompt_tokens_run": engine.prompt_tokens_run,
        "seconds": start.elapsed().as_secs_f64(),
    });
    let r = report(&name, &model, scored, details)?;
    let header = format!(
        "{name} on {model}: {} problems ({}-shot{}, greedy, max {} tokens){}",
        r.n,
        task.num_fewshot(),
        if a.variant == Variant::Chat {
            " as chat turns"
        } else {
            ""
        },
        task.max_gen_toks(),
        resumed_note(&resume, &a.run)
    );
    Ok(Done {
        report: r,
        header,
        order: GSM8K_METRICS,
        speed: speed(&engine, start),
    })
}

/// The exemplars of a run and how they are named in its log: `--fewshot`'s first rows, or
/// the defaults.
fn gsm8k_exemplars(a: &Gsm8kArgs, task: &Task) -> Result<(Vec<Exemplar>, String)> {
    if a.fewshot.is_some() && a.variant != Variant::Gsm8k {
        bail!("--fewshot is for --variant gsm8k; the other variants use their fixed exemplars");
    }
    let train = a.fewshot.as_deref().map(gsm8k::load_problems).transpose()?;
    let exemplars = gsm8k::exemplars_for(a.variant, train.as_deref())?;
    let n = task.num_fewshot();
    let source = match (&a.fewshot, a.variant) {
        (Some(p), _) if exemplars.len() < n => {
            bail!(
                "{}: {} rows, {n} are needed as exemplars",
                p.display(),
                exemplars.len()
            )
        }
        (Some(p), _) => format!("first {n} rows of {}", p.display()),
        (None, Variant::Gsm8k) => "gsm8k_cot exemplars in train-answer form".to_string(),
        (None, _) => "the task yaml's exemplars".to_string(),
    };
    Ok((exemplars, source))
}

pub(super) fn resumed_note(resume: &Resume, run: &RunOpts) -> String {
    let part = run
        .shard
        .map(|s| format!("; part {s} (`pocket eval merge` joins the parts)"))
        .unwrap_or_default();
    match (&run.out, resume.resumed) {
        (Some(p), n) if n > 0 => format!("{part}; {n} resumed from {}", p.display()),
        _ => part,
    }
}

pub(super) fn speed(engine: &Engine, start: Instant) -> Option<String> {
    (engine.generated_tokens > 0).then(|| {
        let s = engine.speculation;
        let spec = if engine.speculate.is_some() {
            format!(
                "; speculation kept {}/{} proposals, {} passes",
                s.accepted, s.proposed, s.passes
            )
        } else {
            String::new()
        };
        let shared = engine.prompt_tokens - engine.prompt_tokens_run;
        let prompts = if shared > 0 {
            format!(
                "; {shared} of {} prompt tokens came from a shared beginning",
                engine.prompt_tokens
            )
        } else {
            String::new()
        };
        format!(
            "generated {} tokens in {:.0} s ({:.1} tok/s including prompts{spec}{prompts})",
            engine.generated_tokens,
            start.elapsed().as_secs_f64(),
            engine.generated_tokens as f64 / engine.decode_seconds.max(1e-9)
        )
    })
}

/// A missing default data file is the usual first-run error: say where it comes from.
pub(super) fn check_data(path: &Path) -> Result<()> {
    if !path.exists() {
        bail!(
            "{}: no such file (scripts/fetch-eval-data.sh downloads the data sets into $POCKET_DATA, else the checkout's data/; or give --data)",
            path.display()
        );
    }
    Ok(())
}
