//! `pocket serve`: the model behind an OpenAI-compatible HTTP API (the server is the
//! `pocket-serve` crate; this file reads the flags, loads the model and sizes its slots).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args)]
#[command(after_help = "\
Endpoints: POST /v1/chat/completions (streaming with \"stream\": true), POST /v1/completions, \
POST /v1/systemone (System One decisions: typed choice / noul / score questions answered with \
probabilities from one forward pass; see `pocket decide --help`), GET /v1/models, GET /health, GET /metrics (Prometheus), GET /openapi.json. Request and response \
shapes are OpenAI's: messages, temperature, top_p, max_tokens / max_completion_tokens, stop, \
seed, n=1, stream, stream_options.include_usage, response_format (json_object, json_schema: the \
answer is constrained to parse and validate), tools / tool_choice (calls come back as \
tool_calls), logprobs / top_logprobs, logit_bias; also top_k, min_p and repeat_penalty. Unknown \
fields are ignored; a wrong type or value is a 400 with OpenAI's error object.

Requests share the model by continuous batching: up to --parallel answers decode together, each \
token for token what `pocket run` gives alone for the same messages and settings. A request \
whose prompt starts like an earlier one's (a chat resent with one more turn) reuses that \
slot's KV cache. Beyond --parallel, --queue requests wait; more get 429 with Retry-After. \
Settings a request leaves out come from the model's generation_config.json, else OpenAI's \
defaults (temperature 1, top_p 1); a request without a seed gets a fresh one.

Not built: n > 1, best_of, suffix, echo with logprobs, images and audio, more than one tool \
call per answer, speculative decoding in the server.

Examples (a request's \"model\" is the served name: the file name without its extension, or \
--alias; GET /v1/models lists it):
  pocket serve SmolLM2-135M-Instruct.Q4_1.gguf --alias local
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"model\": \"local\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'
  pocket serve model.gguf --port 8081 --parallel 16 --api-key secret
  curl http://127.0.0.1:8081/v1/models -H 'Authorization: Bearer secret'")]
pub struct ServeArgs {
    /// Model: an HF checkpoint directory, a .pocket or a GGUF file
    pub model: PathBuf,
    /// Address to listen on (loopback by default; 0.0.0.0 to take requests from other machines)
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the start-up line on stderr names it)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Answers decoded at once (slots, each with its own KV cache of --ctx positions)
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub parallel: u32,
    /// Megabytes of prompts' KV caches kept for later requests that start the same way (the
    /// same system prompt and question from another client, a conversation whose slot was
    /// taken meanwhile); least recently used leave first. 0 turns it off
    #[arg(long, value_name = "MB", default_value_t = 64, hide_short_help = true)]
    pub prompt_cache: usize,
    /// Requests that may wait for a slot; beyond them a request gets 429 [default: 4 per slot]
    #[arg(long, hide_short_help = true)]
    pub queue: Option<usize>,
    /// KV positions per slot (prompt and answer) [default: the model's context, at most 4096,
    /// lowered to what the slots' caches fit in memory]
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Most tokens one answer may have: a request's max_tokens is capped to it [default: --ctx]
    #[arg(long)]
    pub max_tokens_limit: Option<usize>,
    /// The answer budget of a request that sets no max_tokens (at most --max-tokens-limit): a
    /// looping answer costs seconds, not the whole context
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens_default: u32,
    /// Largest request body in bytes (larger: 413)
    #[arg(long, default_value_t = 4 << 20, hide_short_help = true)]
    pub max_body: usize,
    /// Seconds a client has to send a request's headers, and then its body (408); also how long
    /// an idle keep-alive connection stays open
    #[arg(long, default_value_t = 30.0, hide_short_help = true)]
    pub read_timeout: f64,
    /// Seconds a client may stop reading a response before its connection is dropped
    #[arg(long, default_value_t = 60.0, hide_short_help = true)]
    pub write_timeout: f64,
    /// Seconds answers still running at SIGINT/SIGTERM get to finish; then they are cut
    #[arg(long, default_value_t = 10.0, hide_short_help = true)]
    pub shutdown_timeout: f64,
    /// Most open connections; more wait in the kernel's backlog
    #[arg(long, default_value_t = 512, hide_short_help = true)]
    pub max_connections: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (401 otherwise).
    /// Also read from POCKET_API_KEY. The key is never logged
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// The model's name in requests and /v1/models [default: the file name without its
    /// extension]
    #[arg(long, value_name = "NAME")]
    pub alias: Option<String>,
    /// One line per request on stderr: text, or JSON objects for log collectors
    #[arg(long, value_enum, default_value = "text", hide_short_help = true)]
    pub log_format: LogFormat,
    /// Worker threads, at least 1 (default: one per physical core)
    #[arg(short = 't', long)]
    pub threads: Option<u32>,
    /// Skip the .pocket checksum verification at load
    #[arg(long, hide_short_help = true)]
    pub no_verify: bool,
    /// How POST /v1/systemone asks and reads its questions
    #[command(flatten)]
    pub decide: crate::decide::HowArgs,
    /// Testing: pause this many milliseconds after every decode step
    #[arg(long, hide = true, default_value_t = 0)]
    pub debug_step_delay_ms: u64,
}

fn seconds(what: &str, s: f64) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        bail!("--{what} must be a number of seconds above 0 (at most a day); got {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// The model's default name: the file (or directory) name without a model extension.
fn default_id(path: &std::path::Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    for ext in [".pocket", ".gguf"] {
        if let Some(stem) = name.strip_suffix(ext) {
            return stem.to_string();
        }
    }
    name
}

pub fn main(args: ServeArgs) -> Result<ExitCode> {
    let read_timeout = seconds("read-timeout", args.read_timeout)?;
    let write_timeout = seconds("write-timeout", args.write_timeout)?;
    let shutdown_timeout = seconds("shutdown-timeout", args.shutdown_timeout)?;
    if args.max_body < 1024 {
        bail!(
            "--max-body must be at least 1024 bytes; got {}",
            args.max_body
        );
    }
    let api_key = match args.api_key.clone() {
        Some(k) => Some(k),
        None => std::env::var("POCKET_API_KEY").ok(),
    }
    .filter(|k| !k.is_empty());
    if api_key
        .as_ref()
        .is_some_and(|k| !k.chars().all(|c| c.is_ascii_graphic()))
    {
        bail!("--api-key: use printable ASCII without spaces (it travels in an HTTP header)");
    }
    crate::term::set_threads(args.threads)?;
    let decide = args.decide.settings()?;
    let options = crate::settings::load_options(!args.no_verify)?;
    let (mut m, adapters) = crate::settings::open_model(&args.model, options)?;
    // Each request chooses its adapters: states start from the base.
    m.model.lora = None;
    if m.template.is_none() {
        eprintln!(
            "note: {} has no chat template; /v1/chat/completions will refuse requests, \
             /v1/completions takes plain text",
            args.model.display()
        );
    }
    // A head that does not fit the model is refused now, not at the first decision.
    pocket::decide::Decider::new(&m, decide.clone())
        .with_context(|| format!("the decision settings for {}", args.model.display()))?;
    let slots = args.parallel as usize;
    let prompt_cache = args
        .prompt_cache
        .checked_mul(1_000_000)
        .filter(|_| args.prompt_cache <= 1 << 20)
        .context("--prompt-cache: at most 1048576 MB")?;
    let max = m.model.spec.max_position_embeddings;
    if args.ctx.is_some_and(|c| c < 2) {
        bail!("--ctx must be at least 2");
    }
    let ctx = crate::memory::fit_context_slots(
        &m.model,
        "--ctx",
        args.ctx.map(|c| c.min(max)),
        max.min(4096),
        false,
        slots,
        prompt_cache,
    )?;
    if ctx < 2 {
        bail!("the slots' KV caches do not fit in memory: lower --parallel or --ctx");
    }
    let max_tokens_limit = args.max_tokens_limit.unwrap_or(ctx).max(1);
    let max_tokens_default = (args.max_tokens_default as usize).min(max_tokens_limit);
    let opts = pocket_serve::Options {
        host: args.host.clone(),
        port: args.port,
        model_id: args
            .alias
            .clone()
            .unwrap_or_else(|| default_id(&args.model)),
        parallel: slots,
        queue: args.queue.unwrap_or(4 * slots),
        context: ctx,
        prompt_cache,
        max_tokens_limit,
        max_tokens_default,
        max_body: args.max_body,
        read_timeout,
        write_timeout,
        shutdown_timeout,
        max_connections: args.max_connections.max(1),
        api_key,
        log_json: matches!(args.log_format, LogFormat::Json),
        step_delay: Duration::from_millis(args.debug_step_delay_ms),
        decide,
        lora: adapters,
    };
    pocket_serve::run(Arc::new(m), opts)
        .with_context(|| format!("serving {}", args.model.display()))?;
    Ok(ExitCode::SUCCESS)
}
