//! One prompt, one answer: streamed text, or the whole answer as `--json`.

use super::format::FormatArg;
use super::options::{stats_line, RunArgs};
use crate::term;
use anyhow::{bail, Result};
use pocket::chat::ChatSettings;
use pocket::chat_template::Message;
use pocket::constrain::tools::parse_calls;
use pocket::generate::{generate_text_with, Assist, Control, FinishReason, StopAt};
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
    format: Option<&FormatArg>,
    draft: Option<&LoadedModel>,
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
        let msgs = messages(args.system.as_deref(), prompt);
        match format {
            Some(f) => m.encode_answer_prompt(&f.format, &msgs)?,
            None => m.encode_chat(&msgs, true)?,
        }
    };
    let mut guide = match format {
        Some(f) => m
            .guide_for(&f.format)
            .map_err(|e| anyhow::anyhow!("{}: {}", f.origin, e.0))?,
        None => None,
    };
    if let Some(g) = guide.as_mut() {
        g.force = !args.debug_no_forced;
    }
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
    state.on_prefill = super::progress::prefill_bar(args.json);
    let mut sampler = Sampler::new(settings.sampler.clone());
    let stop = StopAt {
        ids: &m.stop_ids,
        strings: &settings.stop,
        max_tokens: settings.max_tokens,
    };
    let mut speculator = args.spec.speculator(m, draft, ctx);
    let mut out = std::io::stdout().lock();
    let answer = generate_text_with(
        &m.model,
        &m.tokenizer,
        &mut state,
        &prompt_ids,
        &mut sampler,
        &stop,
        Assist {
            guide: guide.as_mut(),
            speculate: speculator.as_mut(),
            context: &[],
        },
        |piece| {
            if !args.json {
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
            Control::Continue
        },
    )?;
    let g = &answer.generation;
    // A constrained answer is complete when the constraint accepts it (a lazy tool-call guide
    // that never switched on constrains nothing).
    let complete = match guide.as_mut() {
        Some(guide) => !guide.active() || guide.accepting(),
        None => true,
    };
    let tools = format.is_some_and(|f| !f.format.offered_tools().is_empty());
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
            "kv_cache": {
                "type": state.cache.precision().name(),
                "positions": state.cache.len(),
                "bytes": state.cache.bytes(),
                "context": ctx,
                "bytes_at_context": m.model.kv_bytes(ctx, state.cache.precision()),
            },
        });
        if let Some(s) = &g.speculation {
            obj["speculation"] = json!({
                "method": speculator.as_ref().map(|s| s.name()),
                "proposed": s.proposed,
                "accepted": s.accepted,
                "passes": s.passes,
            });
        }
        if let Some(f) = format {
            obj["forced_tokens"] = json!(g.forced_tokens);
            obj["complete"] = json!(complete);
            obj["timings"]["constraint_setup_ms"] = json!(f.setup.as_secs_f64() * 1e3);
            if let Some(guide) = &guide {
                obj["timings"]["mask_ms"] = json!(guide.mask_time.as_secs_f64() * 1e3);
                obj["timings"]["mask_wait_ms"] = json!(guide.mask_wait.as_secs_f64() * 1e3);
            }
            if let Some(c) = &f.format.constraint {
                obj["constraint"] = json!(c.describe());
            }
        }
        if tools {
            let f = &format.expect("tools come with a format").format;
            let names: Vec<&str> = f.tools.iter().map(|t| t.name.as_str()).collect();
            let p = parse_calls(&answer.text, &names);
            obj["content"] = json!(p.content);
            // OpenAI's shape and finish reason, as `pocket serve` answers (ids numbered here).
            let calls: Vec<_> = (p.calls.iter().enumerate())
                .map(|(i, c)| c.openai(&format!("call_{i}")))
                .collect();
            if !calls.is_empty() && g.finish_reason == FinishReason::Stop {
                obj["finish_reason"] = json!("tool_calls");
            }
            obj["tool_calls"] = json!(calls);
            if !p.errors.is_empty() {
                obj["tool_call_errors"] = json!(p.errors);
            }
        }
        if let Some(l) = first_logits {
            obj["first_logits"] = json!(l);
        }
        writeln!(out, "{obj}")?;
    } else {
        writeln!(out)?;
        drop(out);
        // A cut answer says so, as the chat does; scripts read `finish_reason` from --json.
        match g.finish_reason {
            _ if !complete => {}
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
    if !complete {
        let origin = format.map_or("the constraint", |f| f.origin.as_str());
        eprintln!(
            "error: the answer ended ({}) before it completed {origin}; it is not valid output \
             (-n N allows more tokens)",
            match g.finish_reason {
                FinishReason::Length => format!("at the {}-token limit", settings.max_tokens),
                FinishReason::Context => format!("the {ctx}-token context is full"),
                _ => "early".to_string(),
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
