//! `pocket run`: one prompt (from -p or stdin) or a chat in the terminal.
//!
//! - `options.rs`: the flags ([`RunArgs`]) and how they become sampling settings;
//! - `format.rs`: `--json-schema`, `--grammar`, `--regex`, `--choices`, `--tools`;
//! - `oneshot.rs`: one prompt, one answer (text or `--json`);
//! - `chat.rs`: the interactive chat, with its line editor (`editor.rs`), slash commands
//!   (`commands.rs`) and the keys typed while an answer streams (`typeahead.rs`).
//!
//! Imports run one way: this file → oneshot, chat → options; chat → commands, editor.

mod chat;
mod commands;
mod editor;
mod format;
mod oneshot;
mod options;
mod progress;
mod typeahead;

pub use options::RunArgs;

use anyhow::{bail, Context, Result};
use options::chat_settings;
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

pub fn main(args: RunArgs) -> Result<ExitCode> {
    crate::term::set_threads(args.threads)?;
    let options = crate::settings::load_options(!args.no_verify)?;
    // Read before the model loads: a bad schema or tools file fails fast.
    let mut format = format::from_args(&args)?;
    let (m, _) = crate::settings::open_model(&args.model, options)?;
    if args.spec.on() && format.is_some() {
        bail!("--speculate does not combine with --json-schema, --grammar, --regex, --choices or --tools yet");
    }
    let draft = args.spec.load_draft(&m, options)?;
    if let Some(f) = &mut format {
        format::check(f, &m)?;
    }
    let max = m.model.spec.max_position_embeddings;
    if args.ctx == Some(0) {
        bail!("--ctx must be at least 1");
    }
    let ctx =
        crate::memory::fit_context(&m.model, "--ctx", args.ctx.map(|c| c.min(max)), max, false)?;

    let prompt = match args.prompt.clone() {
        Some(p) => Some(p),
        None if args.prompt_ids.is_some() => Some(String::new()),
        None if !std::io::stdin().is_terminal() => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("reading the prompt from stdin")?;
            let s = String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "stdin: the prompt is not valid UTF-8 (first bad byte at byte {}); pocket reads UTF-8 text",
                    e.utf8_error().valid_up_to()
                )
            })?;
            Some(s.trim_end_matches('\n').to_string())
        }
        None => None,
    };
    match prompt {
        Some(p) => oneshot::run(
            &args,
            &m,
            &chat_settings(&args, &m, false)?.0,
            ctx,
            &p,
            format.as_ref(),
            draft.as_ref(),
        ),
        None if args.json => bail!("--json needs a prompt (-p TEXT or stdin)"),
        None => {
            let (settings, source) = chat_settings(&args, &m, true)?;
            chat::main(&args, &m, settings, source, ctx, format, draft.as_ref())
        }
    }
}
