//! One prompt, one answer: streamed text, or the whole answer as `--json`.

use super::options::{stats_line, RunArgs};
use crate::term;
use anyhow::{bail, Result};
use pocket::chat::ChatSettings;
use pocket::chat_template::Message;
use pocket::generate::{generate_text, Control, FinishReason, StopAt};
use pocket::loader::LoadedModel;
use pocket::sampler::Sampler;
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

fn messages(system: Option<&str>, user: &str) -> Vec<Message> {
    let mut v = Vec::new();
    if let Some(s) = system {
        v.push(Message::new("system", s));
    }
    v.push(Message::new("user", user));
    v
}

pub fn run(
    args: &RunArgs,
    m: &LoadedModel,
    settings: &ChatSettings,
    ctx: usize,
    prompt: &str,
) -> Result<ExitCode> {
    let prompt_ids = if let Some(ids) = &args.prompt_ids {
        let vocab = m.model.spec.vocab_size;
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            bail!("--prompt-ids: token {bad} is outside the vocabulary of {vocab}");
        }
        ids.clone()
    } else if args.raw {
        m.tokenizer.encode(prompt, true)?
    } else {
        m.encode_chat(&messages(args.system.as_deref(), prompt), true)?
    };
    let first_logits = if args.first_logits {
        let mut st = m.model.new_state(ctx);
        Some(
            m.model
                .forward_batch(&mut st, &prompt_ids, pocket::model::Logits::Last)?,
        )
    } else {
        None
    };
    let mut state = m.model.new_state(ctx);
    let mut sampler = Sampler::new(settings.sampler.clone());
    let stop = StopAt {
        ids: &m.stop_ids,
        strings: &settings.stop,
        max_tokens: settings.max_tokens,
    };
    let mut out = std::io::stdout().lock();
    let answer = generate_text(
        &m.model,
        &m.tokenizer,
        &mut state,
        &prompt_ids,
        &mut sampler,
        &stop,
        |piece| {
            if !args.json {
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
            Control::Continue
        },
    )?;
    let g = &answer.generation;
    if args.json {
        let mut obj = json!({
            "model": m.path,
            "text": answer.text,
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
        if let Some(l) = first_logits {
            obj["first_logits"] = json!(l);
        }
        writeln!(out, "{obj}")?;
    } else {
        writeln!(out)?;
        drop(out);
        // A cut answer says so, as the chat does; scripts read `finish_reason` from --json.
        match g.finish_reason {
            FinishReason::Length => eprintln!(
                "(cut at the {}-token limit; -n N for longer answers)",
                settings.max_tokens
            ),
            FinishReason::Context => {
                eprintln!("(cut: the {ctx}-token context is full; --ctx N for more)")
            }
            FinishReason::Stop | FinishReason::Interrupted => {}
        }
        if std::io::stderr().is_terminal() {
            let stats = stats_line(g, 0, state.cache.len(), ctx);
            eprintln!("{}", term::dim(&stats, term::stderr_styled()));
        }
    }
    Ok(ExitCode::SUCCESS)
}
