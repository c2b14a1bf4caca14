//! `pocket eval mc`: multiple choice by log-likelihood on the user's questions, or on MMLU,
//! ARC-Challenge, HellaSwag and GPQA with lm-eval's prompts (`--task`). The scoring and the
//! prompt layouts are the evals crate's; this file loads the data, runs the items with resume
//! and progress, and builds the report (also for `eval suite` and the drift command).

use super::engine::{Engine, HarnessTokenizer};
use super::generation::Done;
use super::{model_name, obj, progress, report, Resume, RunOpts};
use anyhow::{bail, Result};
use clap::Args;
use pocket::loader::LoadedModel;
use pocket_evals::mc::benchmarks::{self, Benchmark};
use pocket_evals::mc::{self, ChoiceScore, Style};
use pocket_evals::results::ItemScores;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(after_help = "\
Data: JSONL ({\"question\": ..., \"choices\": [...] or \"A\": ..., \"B\": ..., \"answer\": 1 or \"B\" or \
the right choice's text, \"id\": optional}) or CSV with a header (question, A, B, C, ... or a \
choices column holding a JSON list, answer, optional id). Answer indices are 0-based.

Benchmarks (--task, data from scripts/fetch-eval-data.sh): mmlu (5-shot from each subject's dev \
split; --limit counts per subject, as lm-eval's), arc_challenge, hellaswag, gpqa (GPQA Diamond, \
its answers in the data's order, not lm-eval's seeded shuffle). The prompts are lm-eval 0.4.13's \
request strings, checked item for item. Headline: acc for mmlu, acc_norm for the others.")]
pub struct McArgs {
    /// Model: an HF checkpoint directory, a GGUF or a .pocket file
    pub model: PathBuf,
    /// Questions: a .csv file, or JSON lines
    #[arg(long, required_unless_present = "task", conflicts_with = "task")]
    pub data: Option<PathBuf>,
    /// A benchmark with lm-eval's prompt layout instead of --data: mmlu, arc_challenge,
    /// hellaswag, gpqa
    #[arg(long, value_parser = parse_benchmark, conflicts_with_all = ["style", "chat"])]
    pub task: Option<Benchmark>,
    /// Where --task reads its data (scripts/fetch-eval-data.sh's layout)
    #[arg(long, default_value_os_t = crate::data_dir::data_root(), value_name = "DIR")]
    pub data_dir: PathBuf,
    /// cloze: "Question: Q\nAnswer:" scored on " choice text" (ARC style); letters: the
    /// choices listed as "A. ..." and scored on " A", " B", ... (MMLU style)
    #[arg(long, default_value = "cloze", value_parser = parse_style)]
    pub style: Style,
    /// Also answer each question by constrained decoding: greedy generation limited to the
    /// choices (`pocket run --choices`), from the same context; scored as `acc_constrained`
    /// next to log-likelihood's `acc`, with how often the two pick the same choice
    #[arg(long)]
    pub constrained: bool,
    /// Ask each question through the model's chat template (the question as the user's
    /// message, the choice as the start of the answer, no delimiter) instead of --style's
    /// plain text: how an instruct model is used for classification
    #[arg(long)]
    pub chat: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

fn parse_benchmark(s: &str) -> Result<Benchmark, String> {
    Benchmark::parse(s).ok_or_else(|| "expected mmlu, arc_challenge, hellaswag or gpqa".to_string())
}

/// One question as the loop sees it, whichever source it came from.
struct Question {
    id: Value,
    request: mc::McRequest,
    answer: usize,
    /// What the run log records of the question (a changed question refuses to resume).
    fields: Map<String, Value>,
    /// "file:line", for messages.
    at: String,
}

fn parse_style(s: &str) -> Result<Style, String> {
    Style::parse(s).ok_or_else(|| "expected cloze or letters".to_string())
}

/// Log-likelihoods logged by an earlier run, if well-formed.
fn logged_choices(rec: &Map<String, Value>, n: usize) -> Option<Vec<ChoiceScore>> {
    let lls = rec.get("lls")?.as_array()?;
    let greedy = rec.get("is_greedy")?.as_array()?;
    if lls.len() != n || greedy.len() != n {
        return None;
    }
    lls.iter()
        .zip(greedy)
        .map(|(l, g)| {
            Some(ChoiceScore {
                ll: l.as_f64()?,
                is_greedy: g.as_bool()?,
            })
        })
        .collect()
}

pub fn main(a: McArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    mc_run(&a)?.print(a.run.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The questions of --data or --task, ids checked unique.
fn questions(a: &McArgs, m: &LoadedModel) -> Result<(Vec<Question>, String, PathBuf)> {
    let qs: Vec<Question> = if let Some(bench) = a.task {
        let items = benchmarks::load(bench, &a.data_dir)?;
        // --limit counts per subject (lm-eval's); --shard splits what it leaves.
        let items = benchmarks::limit(items, a.run.limit.map(|n| n as usize));
        let path = a.data_dir.join(bench.file());
        items
            .into_iter()
            .map(|it| Question {
                id: Value::from(it.id),
                fields: obj(json!({"context": it.request.context, "continuations": it.request.continuations, "answer": it.gold})),
                answer: it.gold,
                request: it.request,
                at: format!("{}:{}", path.display(), it.line),
            })
            .collect()
    } else {
        let data = a
            .data
            .as_ref()
            .expect("clap requires --data without --task");
        let items = a.run.limit(mc::load_items(data)?);
        let mut qs = Vec::with_capacity(items.len());
        for it in items {
            let request = if a.chat {
                let user = [pocket::chat_template::Message::new("user", &it.question)];
                mc::McRequest {
                    context: m.render_chat(&user, true)?,
                    continuations: it.choices.clone(),
                    choice_texts: it.choices.clone(),
                }
            } else {
                mc::request(&it, a.style)
            };
            qs.push(Question {
                id: it.id.clone(),
                fields: obj(
                    json!({"question": it.question, "choices": it.choices, "answer": it.answer}),
                ),
                answer: it.answer,
                request,
                at: format!("{}:{}", data.display(), it.line),
            });
        }
        qs
    };
    let mut seen = HashSet::new();
    for q in &qs {
        if !seen.insert(q.id.to_string()) {
            bail!("{}: id {} appears twice", q.at, q.id);
        }
    }
    let (task, data) = match a.task {
        Some(b) => (b.name().to_string(), a.data_dir.join(b.file())),
        None => (
            format!("mc_{}", if a.chat { "chat" } else { a.style.name() }),
            a.data.clone().unwrap_or_default(),
        ),
    };
    Ok((qs, task, data))
}

/// Scores every question (resuming from --out) and builds the report.
pub fn mc_run(a: &McArgs) -> Result<Done> {
    let (m, _) = crate::settings::open_model(&a.model, crate::settings::load_options(true)?)?;
    let (items, task, data) = questions(a, &m)?;
    let (items, part) = a.run.split(items);
    let max = m.model.spec.max_position_embeddings;
    let ctx = a.run.ctx.unwrap_or(max).min(max);
    let model = model_name(&a.model);
    let identity = json!({"task": task, "model": model});
    let mut resume = Resume::open(a.run.out.as_deref(), obj(identity), part)?;
    let mut engine = Engine::new(&m, ctx);
    let tok = HarnessTokenizer(&m);
    let bar = progress(items.len(), "questions", a.run.json);
    let start = Instant::now();
    let (mut tokens_run, mut right) = (0usize, 0usize);
    let mut constrained_seconds = 0.0;
    let mut scored = Vec::with_capacity(items.len());
    // The context the engine holds: the next question keeps the whole chunks it shares
    // (MMLU's five examples per subject), bit for bit the same scores.
    let mut held = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let req = &it.request;
        let n = req.continuations.len();
        let logged = resume.finished(&it.id, &it.fields)?;
        let (choices, fresh) = match logged.as_ref().and_then(|r| logged_choices(r, n)) {
            Some(c) => (c, false),
            None if logged.is_some() => {
                bail!(
                    "--out: item {} was logged without its log-likelihoods",
                    it.id
                )
            }
            None => {
                let s = mc::loglikelihoods_after(
                    &mut engine,
                    &tok,
                    req,
                    !a.run.no_shared_prefix,
                    &mut held,
                )
                .map_err(|e| anyhow::anyhow!("{}: {e}", it.at))?;
                tokens_run += s.tokens_run;
                (s.choices, true)
            }
        };
        let lls: Vec<f64> = choices.iter().map(|c| c.ll).collect();
        let v = mc::verdict(&lls, &req.choice_texts, it.answer);
        let mut scores: Map<String, Value> = [
            ("acc", v.acc),
            ("acc_norm", v.acc_norm),
            ("acc_bytes", v.acc_bytes),
        ]
        .into_iter()
        .map(|(k, b)| (k.to_string(), Value::from(u8::from(b))))
        .collect();
        let mut constrained_pred = None;
        if a.constrained {
            let t = Instant::now();
            let pred = constrained_choice(&m, &tok, req, ctx)
                .map_err(|e| anyhow::anyhow!("{}: {e}", it.at))?;
            constrained_seconds += t.elapsed().as_secs_f64();
            scores.insert(
                "acc_constrained".into(),
                Value::from(u8::from(pred == it.answer)),
            );
            scores.insert("agree".into(), Value::from(u8::from(pred == v.pred)));
            constrained_pred = Some(pred);
        }
        if fresh {
            let result = obj(json!({
                "lls": lls,
                "is_greedy": choices.iter().map(|c| c.is_greedy).collect::<Vec<_>>(),
                "pred": v.pred,
                "pred_norm": v.pred_norm,
                "pred_bytes": v.pred_bytes,
                "pred_constrained": constrained_pred,
                "scores": scores,
            }));
            resume.append(i, &it.id, &it.fields, result)?;
        }
        right += usize::from(v.acc);
        bar.set_message(format!("acc {:.1}%", 100.0 * right as f64 / (i + 1) as f64));
        bar.inc(1);
        scored.push(ItemScores {
            id: it.id.clone(),
            scores: scores.into_iter().collect(),
            instruction_id_list: None,
        });
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let details = json!({
        "data": data,
        "style": a.task.map(|b| b.name()).unwrap_or(a.style.name()),
        "shared_prefix": !a.run.no_shared_prefix,
        "tokens_run": tokens_run,
        "constrained_seconds": a.constrained.then_some(constrained_seconds),
        "resumed": resume.resumed,
        "seconds": secs,
    });
    let r = report(&task, &model, scored, details)?;
    let header = format!(
        "{task} on {model}: {} questions from {}{}",
        r.n,
        data.display(),
        if resume.resumed > 0 {
            format!("; {} resumed", resume.resumed)
        } else {
            String::new()
        }
    );
    let mut speed = format!("ran {tokens_run} tokens in {secs:.1} s");
    if a.constrained {
        speed.push_str(&format!(
            "\nconstrained decoding took {constrained_seconds:.1} s of that"
        ));
    }
    Ok(Done {
        report: r,
        header,
        order: &["acc", "acc_norm", "acc_bytes", "acc_constrained", "agree"],
        speed: Some(speed),
    })
}

/// The choice greedy decoding picks when only the choices may be written: the context encoded
/// as for log-likelihood, then a guided answer over the continuations (delimiter included).
fn constrained_choice(
    m: &LoadedModel,
    tok: &HarnessTokenizer,
    req: &mc::McRequest,
    ctx: usize,
) -> Result<usize> {
    use pocket::constrain::Constraint;
    use pocket::generate::{generate_text_guided, Control, StopAt};
    use pocket_evals::Tokenize;
    let (context, conts) = mc::split_trailing_space(req);
    let prompt = tok.encode(&context).map_err(|e| anyhow::anyhow!(e))?;
    let c = Constraint::choices(conts.clone()).map_err(|e| anyhow::anyhow!("choices: {}", e.0))?;
    let mut guide = m
        .grammars()
        .map_err(|e| anyhow::anyhow!(e.0))?
        .compile(&c)
        .map_err(|e| anyhow::anyhow!(e.0))?;
    let longest = conts
        .iter()
        .map(|c| m.tokenizer.encode(c, false).map(|t| t.len()).unwrap_or(64))
        .max()
        .unwrap_or(1);
    let mut state = m.model.new_state(ctx);
    let mut sampler = pocket::sampler::Sampler::new(pocket::sampler::SamplerConfig::default());
    let stop = StopAt {
        ids: &m.stop_ids,
        strings: &[],
        max_tokens: longest * 4 + 8,
    };
    let g = generate_text_guided(
        &m.model,
        &m.tokenizer,
        &mut state,
        &prompt,
        &mut sampler,
        &stop,
        Some(&mut guide),
        |_| Control::Continue,
    )?;
    conts
        .iter()
        .position(|c| *c == g.text)
        .ok_or_else(|| anyhow::anyhow!("constrained answer {:?} is none of the choices", g.text))
}
