//! `pocket bench --speculate …`: plain and speculative decoding of the same prompts, alternating,
//! their decode speeds as medians and ratios, and whether the tokens were identical.

use super::BenchArgs;
use anyhow::{bail, Context, Result};
use pocket::chat_template::Message;
use pocket::generate::{generate_with, Assist, Control, Generation};
use pocket::loader::{LoadOptions, LoadedModel};
use pocket::sampler::{Sampler, SamplerConfig};
use pocket::speculate::SpecStats;
use serde::Serialize;
use serde_json::Value;
use std::process::ExitCode;

#[derive(Serialize)]
struct PromptFigure {
    prompt: String,
    tokens: usize,
    plain_tok_s: f64,
    speculative_tok_s: f64,
    speedup: f64,
    identical: bool,
    #[serde(flatten)]
    speculation: SpecStats,
    acceptance: f64,
    tokens_per_pass: f64,
}

#[derive(Serialize)]
struct Report<'a> {
    model: String,
    method: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    draft: Option<String>,
    prompts: Vec<PromptFigure>,
    /// The median over prompts of each prompt's speed-up.
    speedup_median: f64,
    /// Every answer's tokens equal plain decoding's.
    identical: bool,
    load_s: f64,
    ttft_s: f64,
    /// Includes the draft model and its cache.
    peak_rss_bytes: u64,
    threads: usize,
    isa: &'a str,
}

/// One prompt per JSONL line (`prompt` text or `messages`) or per plain-text line; blank lines
/// are skipped. The chat template applies when the model has one.
fn read_prompts(path: &std::path::Path, m: &LoadedModel) -> Result<Vec<(String, Vec<u32>)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the prompts {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), i + 1);
        let messages: Vec<Message> = if line.starts_with('{') {
            let v: Value =
                serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
            match (&v["prompt"], &v["messages"]) {
                (Value::String(p), _) => vec![Message::new("user", p)],
                (_, Value::Array(_)) => serde_json::from_value(v["messages"].clone())
                    .with_context(|| format!("{}: `messages` is not a list of messages", at()))?,
                _ => bail!("{}: expected a `prompt` string or a `messages` list", at()),
            }
        } else {
            vec![Message::new("user", line)]
        };
        let ids = if m.template.is_some() {
            m.encode_chat(&messages, true)?
        } else {
            let text: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
            m.tokenizer.encode(&text.join("\n"), true)?
        };
        let name = messages.last().map_or(String::new(), |m| m.content.clone());
        out.push((name, ids));
    }
    if out.is_empty() {
        bail!("{}: no prompts", path.display());
    }
    Ok(out)
}

pub fn main(
    args: &BenchArgs,
    m: &LoadedModel,
    options: LoadOptions,
    load_s: f64,
    ttft_s: f64,
) -> Result<ExitCode> {
    let Some(path) = &args.prompts else {
        bail!("--speculate needs --prompts FILE: speculation is measured on real text, not random ids");
    };
    if !args.spec.on() {
        bail!("--prompts is for --speculate lookup|draft");
    }
    if args.gen == 0 {
        bail!("-n must be at least 1 for the --speculate test");
    }
    let draft = args.spec.load_draft(m, options)?;
    let prompts = read_prompts(path, m)?;
    let ctx = prompts.iter().map(|(_, p)| p.len()).max().unwrap_or(0) + args.gen + 1;
    if ctx > m.model.spec.max_position_embeddings {
        bail!(
            "a prompt and -n {} need {ctx} positions; the model has {}",
            args.gen,
            m.model.spec.max_position_embeddings
        );
    }
    let run = |ids: &[u32], speculate: bool| -> Result<Generation> {
        let mut state = m.model.new_state(ctx);
        let mut sampler = Sampler::new(SamplerConfig::default());
        let mut spec = if speculate {
            args.spec.speculator(m, draft.as_ref(), ctx)
        } else {
            None
        };
        Ok(generate_with(
            &m.model,
            &mut state,
            ids,
            &mut sampler,
            &m.stop_ids,
            args.gen,
            Assist {
                speculate: spec.as_mut(),
                ..Assist::default()
            },
            |_| Control::Continue,
        )?)
    };
    let mut figures = Vec::new();
    for (name, ids) in &prompts {
        let (mut plain, mut fast) = (Vec::new(), Vec::new());
        let mut identical = true;
        let mut want: Option<Vec<u32>> = None;
        let mut stats = SpecStats::default();
        let mut tokens = 0;
        for rep in 0..args.reps {
            // Alternate which goes first, so drift in the machine's speed hits both.
            for speculate in [rep % 2 == 1, rep % 2 == 0] {
                let g = run(ids, speculate)?;
                let rate = g.decode_tok_per_s().unwrap_or(0.0);
                match &want {
                    None => want = Some(g.tokens.clone()),
                    Some(w) => identical &= *w == g.tokens,
                }
                tokens = g.tokens.len();
                if speculate {
                    fast.push(rate);
                    stats = g.speculation.unwrap_or_default();
                } else {
                    plain.push(rate);
                }
            }
        }
        plain.sort_by(f64::total_cmp);
        fast.sort_by(f64::total_cmp);
        let (p, f) = (super::median(&plain), super::median(&fast));
        let short: String = name.chars().take(60).collect();
        let fig = PromptFigure {
            prompt: short,
            tokens,
            plain_tok_s: p,
            speculative_tok_s: f,
            speedup: f / p,
            identical,
            speculation: stats,
            acceptance: stats.acceptance(),
            tokens_per_pass: tokens.saturating_sub(1) as f64 / stats.passes.max(1) as f64,
        };
        if !args.json {
            eprintln!(
                "{:>6.1} → {:>6.1} tok/s ({:.2}×) {} tokens, kept {}/{} in {} passes{}: {}",
                fig.plain_tok_s,
                fig.speculative_tok_s,
                fig.speedup,
                fig.tokens,
                stats.accepted,
                stats.proposed,
                stats.passes,
                if identical { "" } else { ", NOT IDENTICAL" },
                fig.prompt.replace('\n', " ")
            );
        }
        figures.push(fig);
    }
    let mut ups: Vec<f64> = figures.iter().map(|f| f.speedup).collect();
    ups.sort_by(f64::total_cmp);
    let report = Report {
        model: args.model.display().to_string(),
        method: match args.spec.speculate {
            crate::speculate_args::Method::Draft => "draft",
            _ => "lookup",
        },
        draft: args.spec.draft.as_ref().map(|d| d.display().to_string()),
        identical: figures.iter().all(|f| f.identical),
        speedup_median: super::median(&ups),
        prompts: figures,
        load_s,
        ttft_s,
        peak_rss_bytes: super::peak_rss_bytes(),
        threads: pocket::pool::global().threads(),
        isa: m.model.config.cpu.isa().name(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{}: speculation {} median speed-up {:.2}× over {} prompts, output {}; peak RSS {:.0} MB",
            report.model,
            report.method,
            report.speedup_median,
            report.prompts.len(),
            if report.identical { "identical" } else { "NOT identical" },
            report.peak_rss_bytes as f64 / 1e6
        );
    }
    Ok(if report.identical {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
