//! `pocket eval custom --task FILE MODEL [--model B]`: a user's own samples as a task (the
//! evals crate's `custom` module), on one build or two with the paired comparison.

use super::generation::{open_model, resumed_note, run_items, speed, Done, GenItem};
use super::{model_name, obj, report, Resume, RunOpts};
use anyhow::Result;
use clap::Args;
use pocket_evals::compare::{compare, id_text, RunFile};
use pocket_evals::custom::CustomTask;
use pocket_evals::stats::{paired_bootstrap_ci, PairedItem};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(after_help = "\
The task file (YAML, or JSON when it ends in .json) names the data (JSONL or CSV), a minijinja \
prompt and target over a row's fields, few-shot rows, the answer extraction (first_line, whole, \
regex, json_field, json, choices) and the metric (exact_match, accuracy, token_f1, json_fields), \
with normalisation options and generation settings (max_tokens, stop, and constrain: the answer \
held to a JSON schema, a regex, a grammar or the labels while decoding); docs/evals.md#custom-tasks \
has every field, examples/ the worked tasks. Greedy decoding. Every template is checked against every row before \
the model loads: a wrong field is one error naming the file and line.

Examples:
  pocket eval custom --task examples/intent/task.yaml model.gguf
  pocket eval custom --task examples/extract/task.yaml model.gguf --model model-q4.pocket")]
pub struct CustomArgs {
    /// The task file
    #[arg(long, value_name = "FILE")]
    pub task: PathBuf,
    /// Model: an HF checkpoint directory, a .pocket file or a GGUF
    pub model: PathBuf,
    /// A second build to compare with MODEL on the same rows (B − A, paired interval, flips)
    #[arg(long = "model", value_name = "B")]
    pub model_b: Option<PathBuf>,
    /// With --model: directory for both runs' resumable logs
    #[arg(long, default_value = "eval-runs")]
    pub work: PathBuf,
    #[command(flatten)]
    pub run: RunOpts,
}

pub fn main(a: CustomArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    let task = CustomTask::load(&a.task)?;
    let Some(b) = &a.model_b else {
        let (done, _) = run_custom(&task, &a.model, &a.run)?;
        done.print(a.run.json)?;
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&a.work).map_err(|e| anyhow::anyhow!("{}: {e}", a.work.display()))?;
    let mut done = Vec::new();
    let mut f1s = Vec::new();
    for (i, m) in [&a.model, b].into_iter().enumerate() {
        let file = format!(
            "custom.{}.{}.{}.jsonl",
            task.spec
                .name
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"),
            i + 1,
            model_name(m).replace(
                |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '.',
                "_"
            )
        );
        let run = RunOpts {
            out: Some(a.work.join(file)),
            shard: a.run.shard,
            json: a.run.json,
            limit: a.run.limit,
            ctx: a.run.ctx,
            threads: None,
            batch: a.run.batch,
            no_shared_prefix: a.run.no_shared_prefix,
            spec: a.run.spec.clone(),
        };
        eprintln!(
            "{}: {} ({})",
            task.spec.name,
            m.display(),
            if i == 0 { "A" } else { "B" }
        );
        let (d, f1) = run_custom(&task, m, &run)?;
        done.push(d);
        f1s.push(f1);
    }
    let files: Vec<RunFile> = done
        .iter()
        .zip([&a.model, b])
        .map(|(d, m)| RunFile {
            path: m.clone(),
            task: d.report.task.clone(),
            model: d.report.model.clone(),
            items: d.report.items.clone(),
        })
        .collect();
    let c = compare(&files[0], &files[1])?;
    let f1 = compare_f1(&f1s[0], &f1s[1]);
    if a.run.json {
        println!(
            "{}",
            serde_json::to_string(&json!({
                "runs": [&done[0].report, &done[1].report],
                "comparison": c,
                "token_f1": f1,
            }))?
        );
    } else {
        for d in &done {
            d.print(false)?;
        }
        println!();
        super::compare::print_text(&c, 10);
        if let Some(f) = &f1 {
            let pts = |k: &str| 100.0 * f[k].as_f64().unwrap_or(f64::NAN);
            let ci = f["ci95"]
                .as_array()
                .map(|v| {
                    format!(
                        " [{:+.2}, {:+.2}]",
                        100.0 * v[0].as_f64().unwrap_or(f64::NAN),
                        100.0 * v[1].as_f64().unwrap_or(f64::NAN)
                    )
                })
                .unwrap_or_default();
            println!(
                "\n  token_f1 (mean, {} paired items): A {:.2}, B {:.2}, B-A {:+.2} pts{ci} (95% paired bootstrap)",
                f["items"],
                pts("a"),
                pts("b"),
                pts("diff")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A finished run and, for `token_f1`, each item's F1 by its id.
fn run_custom(
    task: &CustomTask,
    model: &Path,
    run: &RunOpts,
) -> Result<(Done, BTreeMap<String, f64>)> {
    let (rows, part) = run.select((0..task.rows.len()).collect::<Vec<usize>>());
    let (m, ctx) = open_model(model, run, task.spec.chat_template)?;
    // A schema, regex or grammar the engine refuses fails here, before any generation.
    if let Some(c) = task.constraint()? {
        super::engine::compile_constraint(&m, &c)
            .map_err(|e| anyhow::anyhow!("{}: `generation.constrain`: {e}", task.path.display()))?;
    }
    let name = model_name(model);
    // A changed prompt, target, example count, constraint or sampling makes an old log refuse
    // to resume (a greedy, unconstrained task's identity is what it was before either existed).
    let mut identity = json!({
        "task": format!("custom:{}", task.spec.name), "model": name,
        "prompt_template": task.spec.prompt, "target_template": task.spec.target,
        "fewshot": task.spec.fewshot,
        "chat_template": task.spec.chat_template,
    });
    if let Some(c) = task.constraint()? {
        identity["constrain"] = json!(c);
    }
    if let Some((temperature, top_p, seed)) = task.spec.generation.sampling() {
        identity["sampling"] = json!({"temperature": temperature, "top_p": top_p, "seed": seed});
    }
    let mut resume = Resume::open(run.out.as_deref(), obj(identity), part)?;
    let mut items = Vec::with_capacity(rows.len());
    for &i in &rows {
        items.push(GenItem {
            id: task.id(i),
            fields: obj(json!({"row": task.rows[i].fields})),
            request: task.request(i)?,
        });
    }
    let mut engine = super::engine::Engine::new(&m, ctx);
    let start = Instant::now();
    let mut f1 = BTreeMap::new();
    let mut failure = None;
    let scored = run_items(
        &mut engine,
        &mut resume,
        &items,
        run.batching(),
        run.json,
        task.headline(),
        |k, response| match task.score(rows[k], response) {
            Ok(o) => {
                if let Some(v) = o.f1 {
                    f1.insert(id_text(&o.scores.id), v);
                }
                (o.scores, o.extra)
            }
            Err(e) => {
                failure.get_or_insert(e);
                (
                    pocket_evals::results::ItemScores {
                        id: task.id(rows[k]),
                        scores: Default::default(),
                        instruction_id_list: None,
                    },
                    Default::default(),
                )
            }
        },
    )?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    let mean_f1 = (!f1.is_empty()).then(|| f1.values().sum::<f64>() / f1.len() as f64);
    let details = json!({
        "task_file": task.path,
        "data": task.spec.data,
        "metric": format!("{:?}", task.spec.metric),
        "token_f1": mean_f1,
        "resumed": resume.resumed,
        "generated_tokens": engine.generated_tokens,
        "prompt_tokens": engine.prompt_tokens,
        "prompt_tokens_run": engine.prompt_tokens_run,
        "seconds": start.elapsed().as_secs_f64(),
    });
    let r = report(
        &format!("custom:{}", task.spec.name),
        &name,
        scored,
        details,
    )?;
    let mut header = format!(
        "{} on {name}: {} rows of {} (greedy, {}){}",
        task.spec.name,
        r.n,
        task.spec.data.display(),
        if task.spec.chat_template {
            "chat template"
        } else {
            "plain text"
        },
        resumed_note(&resume, run)
    );
    if let Some(f) = mean_f1 {
        header.push_str(&format!("\n  {:<26} {f:.4}", "token_f1 (mean)"));
    }
    let order: &'static [&'static str] = match task.headline() {
        "accuracy" => &["accuracy"],
        "field_accuracy" => &["field_accuracy", "all_fields"],
        _ => &["exact_match"],
    };
    Ok((
        Done {
            report: r,
            header,
            order,
            speed: speed(&engine, start),
        },
        f1,
    ))
}

/// Token F1 of two runs over their common items: the means, B − A and its paired 95 %
/// bootstrap interval (the binary comparison above covers exact match only).
fn compare_f1(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> Option<serde_json::Value> {
    let pairs: Vec<PairedItem> = a
        .iter()
        .filter_map(|(id, &x)| {
            b.get(id).map(|&y| PairedItem {
                a: x,
                b: y,
                units: 1.0,
            })
        })
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let (ma, mb) = (
        pairs.iter().map(|p| p.a).sum::<f64>() / n,
        pairs.iter().map(|p| p.b).sum::<f64>() / n,
    );
    let ci = paired_bootstrap_ci(&pairs, 10_000, 0x5EED);
    Some(json!({"items": pairs.len(), "a": ma, "b": mb, "diff": mb - ma, "ci95": ci}))
}
