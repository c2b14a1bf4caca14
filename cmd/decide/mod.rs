//! `pocket decide`: System One questions answered with probabilities from one forward pass
//! (docs/decisions.md). `mod.rs` asks (a request file or flags); `fit.rs` calibrates and
//! trains heads on labelled samples.

pub mod fit;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use pocket::decide::{Decider, Head, Order, Request, Settings, Style};
use pocket::loader::LoadedModel;
use serde_json::{json, Map, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "\
Each question is answered from one forward pass, with no token generated: `choice` picks one \
option with its probability, `noul` gives the probability of yes, `score` the expected level. \
Questions about one state share its tokens (prefilled once).

Readouts (--readout):
  constrained  the probability constrained decoding (`pocket run --choices`) gives each option's \
name: a softmax over the options' tokens where their spellings part (one pass when the first \
tokens differ). The default.
  keys     each option's name scored as the whole answer (its log-likelihood up to the end of \
the turn); all options in one multi-row pass
  letters  options labelled A, B, …; the next-token probabilities of the labels (one pass)
  pointer  a pointer head (--head): each option's marker against the decision position
  probe    a probe head (--head) trained by `pocket decide fit --train-head` on one question
Noul questions read yes/no, score questions the level digits, in every zero-shot readout.

Decision models: a GGUF with llama.cpp's <arch>.decision.* metadata and systemone template \
(openjev, lev, kev; other types are refused by name); an HF directory with its \
decision_head.safetensors; a base with its LoRA adapter as a separate file (--lora ADAPTER, \
and --head HEAD). Not built yet: `fit` trains probe heads, not pointer heads (pointer heads \
are read and run); images and box questions are refused.

Examples:
  pocket decide MODEL --state \"I was charged twice, I want my money back\" \\
      --choice \"What does the customer want?\" refund=\"wants money back\" cancel track other \\
      --noul \"Is the customer angry?\" --score \"How urgent is it?\" later soon now
  pocket decide MODEL --request request.json --json
  pocket decide fit MODEL --data samples.jsonl -o head.safetensors --train-head"
)]
pub struct DecideArgs {
    #[command(subcommand)]
    pub command: Option<DecideCommand>,
    /// HF checkpoint directory, .pocket file or GGUF file
    #[arg(required = true)]
    pub model: Option<PathBuf>,
    /// A System One request as JSON ({"state", "questions"}), from FILE or - for stdin
    #[arg(long, value_name = "FILE")]
    pub request: Option<String>,
    /// The content the questions are about: TEXT, or @FILE
    #[arg(long, value_name = "TEXT|@FILE")]
    pub state: Option<String>,
    /// A choice question and its options: "QUESTION" KEY[=DESCRIPTION] … (repeatable)
    #[arg(long, num_args = 2.., value_names = ["QUESTION", "KEY=DESC"], action = clap::ArgAction::Append)]
    pub choice: Vec<String>,
    /// A yes/no question (repeatable)
    #[arg(long, value_name = "QUESTION", action = clap::ArgAction::Append)]
    pub noul: Vec<String>,
    /// A score question and its levels from lowest: "QUESTION" LEVEL0 LEVEL1 … (repeatable)
    #[arg(long, num_args = 2.., value_names = ["QUESTION", "LEVEL"], action = clap::ArgAction::Append)]
    pub score: Vec<String>,
    #[command(flatten)]
    pub ask: AskArgs,
    /// Print the System One response (with timings) as JSON
    #[arg(long)]
    pub json: bool,
    /// Print each prompt as the model reads it, before the answers
    #[arg(long)]
    pub show_prompt: bool,
}

/// How questions are asked and read (decide, decide fit, eval decide and serve share these).
#[derive(Args, Clone, Debug)]
pub struct HowArgs {
    /// Decisions: constrained, keys, letters, pointer or probe (default: the head's, else
    /// constrained)
    #[arg(long, value_name = "READOUT", hide_short_help = true)]
    pub readout: Option<String>,
    /// Decisions: state-first or question-first (default: the head's, else state-first)
    #[arg(long, value_name = "ORDER", hide_short_help = true)]
    pub order: Option<String>,
    /// Decisions: ask each choice question in both option orders and average the two
    #[arg(long, hide_short_help = true)]
    pub reverse: bool,
    /// A decision head from `pocket decide fit`: fitted temperatures, and a probe or pointer
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    pub head: Option<PathBuf>,
}

/// [`HowArgs`] and the model's context and threads.
#[derive(Args, Clone, Debug)]
pub struct AskArgs {
    #[command(flatten)]
    pub how: HowArgs,
    /// Context length in tokens (default: the model's maximum, fitted to memory)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Worker threads (default: one per physical core)
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
}

impl AskArgs {
    pub fn settings(&self) -> Result<Settings> {
        self.how.settings()
    }
}

impl HowArgs {
    pub fn settings(&self) -> Result<Settings> {
        let style = match self.readout.as_deref() {
            None => None,
            Some(s) => Some(Style::parse(s).ok_or_else(|| {
                anyhow!("--readout {s}: expected constrained, keys, letters, pointer or probe")
            })?),
        };
        let order =
            match self.order.as_deref() {
                None => None,
                Some(s) => Some(Order::parse(s).ok_or_else(|| {
                    anyhow!("--order {s}: expected state-first or question-first")
                })?),
            };
        let head = match &self.head {
            Some(p) => Some(std::sync::Arc::new(Head::load(p)?)),
            None => None,
        };
        Ok(Settings {
            style,
            order,
            reverse: self.reverse.then_some(true),
            head,
        })
    }
}

impl AskArgs {
    /// The model, loaded with this process's engine settings, and the context it runs with.
    pub fn load(&self, path: &Path) -> Result<(LoadedModel, usize)> {
        crate::term::set_threads(self.threads)?;
        let (m, _) = crate::settings::open_model(path, crate::settings::load_options(true)?)?;
        let max = m.model.spec.max_position_embeddings;
        if self.ctx == Some(0) {
            bail!("--ctx must be at least 1");
        }
        let ctx =
            crate::memory::fit_context(&m.model, "--ctx", self.ctx.map(|c| c.min(max)), max, true)?;
        Ok((m, ctx))
    }
}

#[derive(Subcommand)]
pub enum DecideCommand {
    /// Fit per-type temperatures (and with --train-head a probe head) on labelled samples, and
    /// report accuracy, log loss, Brier score and calibration error before and after
    Fit(fit::FitArgs),
}

/// The values of each occurrence of a repeatable multi-value flag (`--choice Q a b --choice
/// Q2 c d`), which clap's derive flattens.
fn occurrences(m: Option<&clap::ArgMatches>, id: &str) -> Vec<Vec<String>> {
    m.and_then(|m| m.get_occurrences::<String>(id))
        .map(|o| o.map(|v| v.cloned().collect()).collect())
        .unwrap_or_default()
}

pub fn main(args: DecideArgs, matches: Option<&clap::ArgMatches>) -> Result<ExitCode> {
    if let Some(DecideCommand::Fit(f)) = args.command {
        return fit::main(f);
    }
    let groups = (
        occurrences(matches, "choice"),
        occurrences(matches, "score"),
    );
    let body = request_body(&args, &groups.0, &groups.1)?;
    let settings = args.ask.settings()?;
    let model_path = args.model.clone().expect("clap requires MODEL");
    let t0 = Instant::now();
    let (m, ctx) = args.ask.load(&model_path)?;
    let load = t0.elapsed();
    let decider = Decider::new(&m, settings)?;
    let req = decider.parse(&body).map_err(|errors| {
        let first = errors[0].line();
        match errors.len() {
            1 => anyhow!("the request: {first}"),
            n => anyhow!("the request: {first} (and {} more)", n - 1),
        }
    })?;
    let plan = decider.plan(&req, ctx)?;
    if args.show_prompt {
        for (i, v) in plan.variants.iter().enumerate() {
            let q = &req.questions[v.question];
            let rev = if v.reversed { ", options reversed" } else { "" };
            eprintln!("--- {} ({}{rev}) ---", q.name, q.kind.name());
            eprintln!("{}", decider.prompt_text(&plan, i));
        }
    }
    let mut state = m.model.new_state(ctx);
    let mut cached = Vec::new();
    let (scores, timing) = decider.run(&mut state, &mut cached, &plan, false)?;
    let name = model_name(&model_path);
    let mut resp = decider.response(&name, &req, &plan, &scores);
    if args.json {
        resp["timings"] = json!({
            "load_ms": load.as_secs_f64() * 1e3,
            "prefill_ms": timing.prefill.as_secs_f64() * 1e3,
            "readout_ms": timing.readout.as_secs_f64() * 1e3,
            "readout": decider.readout_name(),
            "order": decider.order().name(),
        });
        println!("{}", serde_json::to_string_pretty(&resp)?);
    } else {
        print_answers(&req, &resp["answers"]);
        let styled = crate::term::stderr_styled();
        eprintln!(
            "{}",
            crate::term::dim(
                &format!(
                    "[{} readout · {} prompt tokens · prefill {:.0} ms, readout {:.0} ms]",
                    decider.readout_name(),
                    plan.input_tokens(),
                    timing.prefill.as_secs_f64() * 1e3,
                    timing.readout.as_secs_f64() * 1e3
                ),
                styled
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The served name of a model: its file name without the extension.
pub fn model_name(path: &Path) -> String {
    let stem = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    stem.map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// The request as JSON: `--request`, or one built from `--state` and the question flags.
fn request_body(
    args: &DecideArgs,
    choices: &[Vec<String>],
    scores: &[Vec<String>],
) -> Result<Value> {
    let flags = !args.choice.is_empty() || !args.noul.is_empty() || !args.score.is_empty();
    if let Some(src) = &args.request {
        if flags || args.state.is_some() {
            bail!("--request takes the whole request; leave out --state, --choice, --noul and --score");
        }
        let text = if src == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the request from stdin")?;
            s
        } else {
            std::fs::read_to_string(src).with_context(|| format!("reading {src}"))?
        };
        let what = if src == "-" { "stdin" } else { src.as_str() };
        return serde_json::from_str(&text)
            .map_err(|e| anyhow!("{what}: not a JSON request ({e})"));
    }
    let Some(state) = &args.state else {
        bail!(
            "give the content with --state TEXT (or @FILE), or a whole request with --request FILE"
        );
    };
    if !flags {
        bail!("ask at least one question: --choice, --noul or --score");
    }
    let state = match state.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
        None => state.clone(),
    };
    let mut questions = Map::new();
    let name = |kind: &str, questions: &Map<String, Value>| {
        let mut n = kind.to_string();
        let mut i = 2;
        while questions.contains_key(&n) {
            n = format!("{kind}_{i}");
            i += 1;
        }
        n
    };
    for c in choices {
        let mut criteria = Map::new();
        for opt in &c[1..] {
            let (k, d) = match opt.split_once('=') {
                Some((k, d)) => (k, Value::String(d.into())),
                None => (opt.as_str(), Value::Null),
            };
            if criteria.insert(k.to_string(), d).is_some() {
                bail!("--choice {:?}: option {k:?} is given twice", c[0]);
            }
        }
        let n = name("choice", &questions);
        questions.insert(
            n,
            json!({"type": "choice", "instructions": c[0], "criteria": criteria}),
        );
    }
    for q in &args.noul {
        let n = name("noul", &questions);
        questions.insert(n, json!({"type": "noul", "instructions": q}));
    }
    for s in scores {
        let n = name("score", &questions);
        questions.insert(
            n,
            json!({"type": "score", "instructions": s[0], "criteria": s[1..]}),
        );
    }
    Ok(json!({"state": state, "questions": questions}))
}

fn print_answers(req: &Request, answers: &Value) {
    for q in &req.questions {
        let a = &answers[&q.name];
        let probs = |a: &Value| -> String {
            let mut v: Vec<(String, f64)> = a["probabilities"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, p)| (k.clone(), p.as_f64().unwrap_or(0.0)))
                        .collect()
                })
                .unwrap_or_default();
            v.sort_by(|x, y| y.1.total_cmp(&x.1));
            v.iter()
                .take(6)
                .map(|(k, p)| format!("{k} {p:.3}"))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        match a["type"].as_str() {
            Some("choice") => println!(
                "{}: {} (confidence {:.2})   {}",
                q.name,
                a["choice"].as_str().unwrap_or(""),
                a["confidence"].as_f64().unwrap_or(0.0),
                probs(a)
            ),
            Some("noul") => println!("{}: yes {:.3}", q.name, a["noul"].as_f64().unwrap_or(0.0)),
            _ => println!(
                "{}: {:.2} (confidence {:.2})   {}",
                q.name,
                a["score"].as_f64().unwrap_or(0.0),
                a["confidence"].as_f64().unwrap_or(0.0),
                probs(a)
            ),
        }
    }
}
