//! `pocket run`: one prompt (from -p or stdin) or a chat in the terminal.

use crate::term;
use anyhow::{bail, Context, Result};
use clap::Args;
use pocket::chat_template::Message;
use pocket::generate::{generate, Control, Generation};
use pocket::loader::LoadedModel;
use pocket::model::State;
use pocket::sampler::{Sampler, SamplerConfig};
use pocket::tokenizer::TextStream;
use serde_json::json;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
Without -p and with a terminal on stdin, opens a chat: type a message and press Enter; \
/reset clears the conversation, /exit or Ctrl-D leaves. (Line editing, history and the full \
command set arrive with issue #4.)
With stdin not a terminal, the whole of stdin is the prompt.

Examples:
  pocket run models/smollm2-135m-instruct -p \"What is the capital of France?\"
  echo \"Tell me a joke\" | pocket run MODEL --json --temp 0.7 --seed 1")]
pub struct RunArgs {
    /// Model: an HF checkpoint directory (config.json, *.safetensors, tokenizer.json)
    pub model: PathBuf,
    /// The user message (one-shot mode)
    #[arg(short, long)]
    pub prompt: Option<String>,
    /// System prompt (replaces the template's default, if it has one)
    #[arg(long)]
    pub system: Option<String>,
    /// Send the prompt as plain text, without the chat template (base models)
    #[arg(long)]
    pub raw: bool,
    /// Maximum tokens to generate per answer
    #[arg(short = 'n', long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Sampling temperature; 0 is greedy. Default: the model's generation_config, else 0
    #[arg(long)]
    pub temp: Option<f32>,
    /// Keep only the K most likely tokens (0: off)
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches P (1.0: off)
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than P times the most likely one (0: off)
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Random seed: the same seed and settings give the same text
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Context length in tokens (default: the model's maximum)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Worker threads (default: all cores)
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// Print one JSON object (text, token ids, finish reason, timings) instead of streaming
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: RunArgs) -> Result<ExitCode> {
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global()
            .context("starting the thread pool")?;
    }
    let m = LoadedModel::open(&args.model)?;
    let sampler = sampler_config(&args, &m)?;
    let ctx = args
        .ctx
        .unwrap_or(m.model.spec.max_position_embeddings)
        .min(m.model.spec.max_position_embeddings);
    if ctx == 0 {
        bail!("--ctx must be at least 1");
    }

    let prompt = match args.prompt.clone() {
        Some(p) => Some(p),
        None if !std::io::stdin().is_terminal() => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the prompt from stdin")?;
            Some(s.trim_end_matches('\n').to_string())
        }
        None => None,
    };
    match prompt {
        Some(p) => one_shot(&args, &m, sampler, ctx, &p),
        None if args.json => bail!("--json needs a prompt (-p TEXT or stdin)"),
        None => chat(&args, &m, sampler, ctx),
    }
}

/// Command-line options over the model's generation_config defaults.
fn sampler_config(args: &RunArgs, m: &LoadedModel) -> Result<SamplerConfig> {
    let g = &m.generation;
    let sampling = g.do_sample.unwrap_or(false);
    let model_temp = if sampling {
        g.temperature.unwrap_or(1.0) as f32
    } else {
        0.0
    };
    let cfg = SamplerConfig {
        temperature: args.temp.unwrap_or(model_temp),
        top_k: args
            .top_k
            .or(if sampling { g.top_k } else { None })
            .unwrap_or(0),
        top_p: args
            .top_p
            .or(if sampling {
                g.top_p.map(|p| p as f32)
            } else {
                None
            })
            .unwrap_or(1.0),
        min_p: args
            .min_p
            .or(if sampling {
                g.min_p.map(|p| p as f32)
            } else {
                None
            })
            .unwrap_or(0.0),
        seed: args.seed,
    };
    if !(cfg.temperature >= 0.0 && cfg.temperature.is_finite()) {
        bail!("--temp must be a finite number >= 0");
    }
    if !(cfg.top_p > 0.0 && cfg.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1]");
    }
    if !(0.0..=1.0).contains(&cfg.min_p) {
        bail!("--min-p must be in [0, 1]");
    }
    Ok(cfg)
}

fn messages(system: Option<&str>, user: &str) -> Vec<Message> {
    let mut v = Vec::new();
    if let Some(s) = system {
        v.push(Message::new("system", s));
    }
    v.push(Message::new("user", user));
    v
}

fn one_shot(
    args: &RunArgs,
    m: &LoadedModel,
    cfg: SamplerConfig,
    ctx: usize,
    prompt: &str,
) -> Result<ExitCode> {
    let prompt_ids = if args.raw {
        m.tokenizer.encode(prompt, true)?
    } else {
        m.encode_chat(&messages(args.system.as_deref(), prompt), true)?
    };
    let mut state = m.model.new_state(ctx);
    let mut sampler = Sampler::new(cfg);
    let mut stream = TextStream::new(&m.tokenizer);
    let mut out = std::io::stdout().lock();
    let g = generate(
        &m.model,
        &mut state,
        &prompt_ids,
        &mut sampler,
        &m.stop_ids,
        args.max_tokens as usize,
        |id| {
            if !args.json {
                if let Some(piece) = stream.push(id) {
                    let _ = out.write_all(piece.as_bytes());
                    let _ = out.flush();
                }
            }
            Control::Continue
        },
    )?;
    let text = m.tokenizer.decode(&g.tokens, true);
    if args.json {
        let obj = json!({
            "model": m.path,
            "text": text,
            "prompt_ids": prompt_ids,
            "generated_ids": g.tokens,
            "prompt_tokens": prompt_ids.len(),
            "generated_tokens": g.tokens.len(),
            "finish_reason": g.finish_reason,
            "timings": {
                "prefill_ms": g.prefill_time.as_secs_f64() * 1e3,
                "decode_ms": g.decode_time.as_secs_f64() * 1e3,
                "prefill_tok_per_s": g.prefill_tok_per_s(),
                "decode_tok_per_s": g.decode_tok_per_s(),
            },
        });
        writeln!(out, "{obj}")?;
    } else {
        if let Some(rest) = stream.finish() {
            out.write_all(rest.as_bytes())?;
        }
        writeln!(out)?;
        drop(out);
        print_stats(&g, state.cache.len(), ctx);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_stats(g: &Generation, used: usize, ctx: usize) {
    let styled = term::stderr_styled();
    if !std::io::stderr().is_terminal() {
        return;
    }
    let line = format!(
        "[{} prompt tok at {:.1} tok/s, {} generated at {:.1} tok/s, context {used}/{ctx}, {:?}]",
        g.prefill_tokens,
        g.prefill_tok_per_s(),
        g.tokens.len(),
        g.decode_tok_per_s(),
        g.finish_reason
    );
    eprintln!("{}", term::dim(&line, styled));
}

/// A minimal multi-turn chat. The conversation is re-rendered each turn and only the tokens
/// after the longest prefix shared with the KV cache are run.
fn chat(args: &RunArgs, m: &LoadedModel, cfg: SamplerConfig, ctx: usize) -> Result<ExitCode> {
    if args.raw {
        bail!("--raw needs a prompt (-p TEXT or stdin); the chat uses the template");
    }
    let mut history: Vec<Message> = Vec::new();
    if let Some(s) = &args.system {
        history.push(Message::new("system", s));
    }
    let mut state = m.model.new_state(ctx);
    let mut cached: Vec<u32> = Vec::new();
    let mut sampler = Sampler::new(cfg);
    let stdin = std::io::stdin();
    eprintln!(
        "pocket chat with {} — /reset to start over, /exit or Ctrl-D to leave",
        m.path.display()
    );
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(ExitCode::SUCCESS);
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => return Ok(ExitCode::SUCCESS),
            "/reset" => {
                history.retain(|msg| msg.role == "system");
                state.cache.clear();
                cached.clear();
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(Message::new("user", line));
        let ids = m.encode_chat(&history, true)?;
        let shared = cached
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count()
            .min(ids.len() - 1);
        state.cache.truncate(shared);
        if ids.len() > state.cache.capacity() {
            history.pop();
            eprintln!(
                "(the conversation no longer fits the {ctx}-token context: /reset to start over)"
            );
            continue;
        }
        let mut stream = TextStream::new(&m.tokenizer);
        let mut out = std::io::stdout().lock();
        let g = generate_turn(
            m,
            &mut state,
            &ids[shared..],
            &mut sampler,
            args,
            &mut stream,
            &mut out,
        )?;
        if let Some(rest) = stream.finish() {
            out.write_all(rest.as_bytes())?;
        }
        writeln!(out)?;
        drop(out);
        print_stats(&g, state.cache.len(), ctx);
        history.push(Message::new(
            "assistant",
            &m.tokenizer.decode(&g.tokens, true),
        ));
        // The cache holds the prompt and every generated token except the last.
        cached = ids;
        cached.extend(&g.tokens[..g.tokens.len().saturating_sub(1)]);
        cached.truncate(state.cache.len());
    }
}

fn generate_turn(
    m: &LoadedModel,
    state: &mut State,
    new_ids: &[u32],
    sampler: &mut Sampler,
    args: &RunArgs,
    stream: &mut TextStream,
    out: &mut impl Write,
) -> Result<Generation> {
    Ok(generate(
        &m.model,
        state,
        new_ids,
        sampler,
        &m.stop_ids,
        args.max_tokens as usize,
        |id| {
            if let Some(piece) = stream.push(id) {
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
            Control::Continue
        },
    )?)
}
