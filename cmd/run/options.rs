//! `pocket run`'s flags and how they become sampling settings (the model's generation_config,
//! pocket's chat defaults, or greedy), plus the one-line reports both modes print.

use anyhow::{bail, Result};
use clap::Args;
use pocket::chat::ChatSettings;
use pocket::generate::{FinishReason, Generation};
use pocket::loader::LoadedModel;
use pocket::sampler::SamplerConfig;
use std::path::PathBuf;

/// `pocket run`'s examples, shown by `-h` and `--help` alike.
macro_rules! run_examples {
    () => {
        "Examples:
  pocket run models/smollm2-135m-instruct.pocket
  pocket run SmolLM2-135M-Instruct.Q4_1.gguf -p \"What is the capital of France?\"
  pocket run models/qwen-checkpoint/ --temp 0
  echo \"Tell me a joke\" | pocket run MODEL --json --temp 0.7 --seed 1 --stop \"\\n\\n\"
  pocket run MODEL -p \"Ana, 31, Porto\" --json-schema person.json
  pocket run MODEL -p \"Wake me at 7\" --choices set_alarm,weather,other
  pocket run MODEL -p \"Weather in Oslo?\" --tools tools.json --tool-choice required --json
  pocket run MODEL -p \"Fix the typos: ...\" --speculate lookup --json
  pocket run model-q8.pocket --speculate draft --draft model-q4.pocket"
    };
}

#[derive(Args)]
#[command(
    after_help = concat!(
        run_examples!(),
        "\n\n`pocket run --help` adds the sampling, speculation and expert options, the chat's \
keys and the sampling defaults."
    ),
    after_long_help = concat!(
        run_examples!(),
        "\n\n\
\
Without -p and with a terminal on stdin, opens a chat: type a message and press Enter. A line \
ending in \\ continues on the next line (pasted text may span lines). Up/Down recall earlier \
messages (history file: --history, default $XDG_STATE_HOME/pocket/history or \
~/.local/state/pocket/history). Ctrl-C stops an answer (or clears the line), Ctrl-D or /exit \
leaves; /help lists the commands (/reset, /system, /set, /stats, /save, /load, and /schema, \
/choices, /grammar, /regex, /free, /tool for structured answers).
With stdin not a terminal, the whole of stdin is the prompt.

Sampling defaults: a chat samples with the model's generation_config.json when it sets do_sample \
(temperature, top_k, top_p, min_p), else with pocket's chat defaults (temp 0.7, top-p 0.9, \
repeat penalty 1.1, seed 0); the startup line says which. One answer (-p, stdin, --json) is \
greedy (temp 0). Either way generation_config's repetition_penalty and max_new_tokens apply \
(else 512 tokens), and flags override. --temp 0 makes a chat greedy. Penalties look at the \
last --repeat-last-n tokens (default 64).

Exit codes: 0 success, 1 bad input or failure, 2 bad usage, 3 not built yet.

Speculative decoding (--speculate lookup|draft) gives the answer plain decoding gives, token \
for token, in fewer passes; --json reports `speculation` {proposed, accepted, passes}. It does \
not combine with structured output yet: a constrained answer decodes plainly.

Structured output: an answer under --json-schema, --grammar, --regex or --choices that ends \
normally is complete and valid; one cut by -n or the context is reported (\"complete\": false in \
--json) and exits 1. See docs/structured-output.md for what is supported."
    )
)]
pub struct RunArgs {
    /// Model: an HF checkpoint directory (config.json, *.safetensors, tokenizer.json), a
    /// .pocket file or a GGUF file
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
    /// Maximum tokens to generate per answer [default: generation_config's max_new_tokens,
    /// else 512]
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; 0 is greedy [default: a chat 0.7 (or generation_config's); one
    /// answer 0]
    #[arg(long)]
    pub temp: Option<f32>,
    /// Keep only the K most likely tokens (0: off)
    #[arg(long, hide_short_help = true)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches P (1.0: off) [default: a chat
    /// 0.9 (or generation_config's); one answer 1.0]
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than P times the most likely one (0: off)
    #[arg(long, hide_short_help = true)]
    pub min_p: Option<f32>,
    /// Make tokens seen recently less likely: positive logits are divided by it, negative
    /// ones multiplied (1.0: off) [default: generation_config's repetition_penalty, else 1.1 in
    /// a chat and 1.0 for one answer]
    #[arg(long, hide_short_help = true)]
    pub repeat_penalty: Option<f32>,
    /// Subtract this from the logit of every token seen recently (0: off)
    #[arg(long, default_value_t = 0.0, hide_short_help = true)]
    pub presence_penalty: f32,
    /// Subtract this times the number of recent occurrences from a token's logit (0: off)
    #[arg(long, default_value_t = 0.0, hide_short_help = true)]
    pub frequency_penalty: f32,
    /// How many recent tokens (prompt and answer) the penalties look at
    #[arg(long, default_value_t = 64, hide_short_help = true)]
    pub repeat_last_n: usize,
    /// End the answer when its text contains STR (not printed); repeatable. \n and \t are
    /// read as a newline and a tab
    #[arg(long, value_name = "STR", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub stop: Vec<String>,
    /// Random seed: the same seed and settings give the same text
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Context length in tokens (default: the model's maximum)
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Worker threads, at least 1 (default: one per physical core; more than the machine's
    /// CPUs is lowered to that count, with a note)
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Print one JSON object (text, token ids, finish reason, timings) instead of streaming
    #[arg(long)]
    pub json: bool,
    /// Token ids to run instead of a prompt (comma-separated; no chat template): for comparing
    /// engines token for token
    #[arg(long, value_name = "IDS", value_delimiter = ',', conflicts_with_all = ["prompt", "raw", "system"], hide_short_help = true)]
    pub prompt_ids: Option<Vec<u32>>,
    /// With --json: also print the logits after the prompt (`first_logits`, one per vocabulary
    /// entry)
    #[arg(long, requires = "json", hide_short_help = true)]
    pub first_logits: bool,
    /// The answer is one JSON value valid under this JSON schema: a file, or the schema itself
    /// (text starting with `{`). Unsupported schema keywords are refused before generation
    #[arg(
        long,
        value_name = "FILE|JSON",
        group = "format",
        help_heading = "Structured output"
    )]
    pub json_schema: Option<String>,
    /// The answer matches this grammar: a Lark file (llguidance's dialect) or a GBNF file
    /// (llama.cpp's `root ::= …`)
    #[arg(
        long,
        value_name = "FILE",
        group = "format",
        help_heading = "Structured output",
        hide_short_help = true
    )]
    pub grammar: Option<PathBuf>,
    /// The answer matches this regular expression, all of it
    #[arg(
        long,
        value_name = "RE",
        group = "format",
        help_heading = "Structured output",
        hide_short_help = true
    )]
    pub regex: Option<String>,
    /// The answer is exactly one of these labels (comma-separated): classification in one
    /// short decode
    #[arg(
        long,
        value_name = "A,B,…",
        value_delimiter = ',',
        group = "format",
        help_heading = "Structured output"
    )]
    pub choices: Option<Vec<String>>,
    /// Tools the model may call: a JSON file holding OpenAI's `tools` array. Calls come back as
    /// `tool_calls` in --json
    #[arg(long, value_name = "FILE", conflicts_with_all = ["format", "raw", "prompt_ids"], help_heading = "Structured output")]
    pub tools: Option<PathBuf>,
    /// auto: the model decides (a call it opens is constrained to a tool's schema); required:
    /// it must call one; none: tools are not offered; NAME: it must call that tool
    #[arg(
        long,
        value_name = "CHOICE",
        requires = "tools",
        default_value = "auto",
        help_heading = "Structured output"
    )]
    pub tool_choice: String,
    #[command(flatten)]
    pub spec: crate::speculate_args::SpecArgs,
    /// When a chat outgrows the context, the system prompt and the newest turns stay and the
    /// oldest go. By default the kept turns are encoded again at their new positions (exact,
    /// slower on a long chat); --context-shift instead moves them down in the KV cache with
    /// their keys re-rotated, so nothing runs again (llama.cpp's trade: the kept turns keep
    /// what they computed beside the dropped ones). Not for models with sliding-window
    /// layers (Gemma), which re-encode
    #[arg(long, hide_short_help = true)]
    pub context_shift: bool,
    /// Chat history file [default: $XDG_STATE_HOME/pocket/history, else
    /// ~/.local/state/pocket/history]
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "no_history",
        hide_short_help = true
    )]
    pub history: Option<PathBuf>,
    /// Keep no chat history file
    #[arg(long, hide_short_help = true)]
    pub no_history: bool,
    /// Skip checking a .pocket's tensor checksums at load (a damaged file then runs, with
    /// whatever output its bytes give)
    #[arg(long, hide_short_help = true)]
    pub no_verify: bool,
    /// Sample every constrained token from its mask, even forced ones (for measuring what
    /// forced-token batching saves)
    #[arg(long, hide = true)]
    pub debug_no_forced: bool,
    /// Sleep this long after each streamed token: for terminal tests and recordings
    #[arg(long, hide = true, default_value_t = 0)]
    pub debug_token_delay_ms: u64,
}

/// Where the sampling settings came from, for the chat's startup line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SamplingSource {
    /// The model's generation_config.json asks for sampling (`do_sample`).
    GenerationConfig,
    /// pocket's chat defaults: the model sets none.
    ChatDefaults,
    /// Greedy: the default for one-shot answers (`-p`, stdin, `--json`), as scripts want the
    /// same answer every time.
    Greedy,
}

/// pocket's chat sampling for models whose generation_config sets none: mild temperature and
/// nucleus sampling with a light repetition penalty, the settings llama.cpp's and Ollama's chats
/// ship with (greedy decoding makes small models loop in a conversation).
const CHAT_TEMPERATURE: f32 = 0.7;
const CHAT_TOP_P: f32 = 0.9;
const CHAT_REPEAT_PENALTY: f32 = 1.1;

/// Command-line options over the model's generation_config defaults. A chat (`chat` true)
/// samples: the model's own settings when its generation_config asks for sampling, else pocket's
/// chat defaults. A one-shot answer is greedy unless a flag says otherwise. generation_config's
/// repetition penalty and length apply either way, as in transformers.
pub fn chat_settings(
    args: &RunArgs,
    m: &LoadedModel,
    chat: bool,
) -> Result<(ChatSettings, SamplingSource)> {
    let g = &m.generation;
    let source = match (chat, g.do_sample.unwrap_or(false)) {
        (true, true) => SamplingSource::GenerationConfig,
        (true, false) => SamplingSource::ChatDefaults,
        (false, _) => SamplingSource::Greedy,
    };
    // The model's defaults by one rule shared with the server; the flags go over them.
    let base = match source {
        SamplingSource::ChatDefaults => SamplerConfig {
            temperature: CHAT_TEMPERATURE,
            top_p: CHAT_TOP_P,
            repeat_penalty: CHAT_REPEAT_PENALTY,
            ..SamplerConfig::default()
        },
        _ => SamplerConfig::default(),
    }
    .with_generation_config(g, source == SamplingSource::GenerationConfig);
    let sampler = SamplerConfig {
        temperature: args.temp.unwrap_or(base.temperature),
        top_k: args.top_k.unwrap_or(base.top_k),
        top_p: args.top_p.unwrap_or(base.top_p),
        min_p: args.min_p.unwrap_or(base.min_p),
        repeat_penalty: args.repeat_penalty.unwrap_or(base.repeat_penalty),
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        repeat_last_n: args.repeat_last_n,
        seed: args.seed,
    };
    if let Err(e) = sampler.validate() {
        bail!("--{e}");
    }
    let settings = ChatSettings {
        sampler,
        max_tokens: args
            .max_tokens
            .map(|n| n as usize)
            .or(g.max_new_tokens)
            .unwrap_or(512)
            .max(1),
        stop: args.stop.iter().map(|s| unescape(s)).collect(),
    };
    Ok((settings, source))
}

/// The chat's startup line about sampling: what is active and where it came from.
pub fn sampling_line(s: &ChatSettings, source: SamplingSource, overridden: bool) -> String {
    let c = &s.sampler;
    let what = if c.temperature == 0.0 {
        "greedy".to_string()
    } else {
        let mut parts = vec![format!("temp {}", c.temperature)];
        if c.top_k > 0 {
            parts.push(format!("top-k {}", c.top_k));
        }
        if c.top_p < 1.0 {
            parts.push(format!("top-p {}", c.top_p));
        }
        if c.min_p > 0.0 {
            parts.push(format!("min-p {}", c.min_p));
        }
        parts.push(format!("seed {}", c.seed));
        parts.join(" · ")
    };
    let penalty = if c.repeat_penalty != 1.0 {
        format!(" · repeat penalty {}", c.repeat_penalty)
    } else {
        String::new()
    };
    let from = match (source, overridden) {
        (_, true) => "your flags over ",
        _ => "",
    };
    let base = match source {
        SamplingSource::GenerationConfig => "the model's generation_config.json",
        SamplingSource::ChatDefaults => "pocket's chat defaults",
        SamplingSource::Greedy => "greedy default",
    };
    let hint = if c.temperature == 0.0 {
        ""
    } else {
        "; --temp 0 for greedy"
    };
    format!(
        "sampling: {what}{penalty} · {} tokens max ({from}{base}{hint})",
        s.max_tokens
    )
}

/// `\n` and `\t` typed in a stop string mean a newline and a tab: a shell makes the real
/// characters awkward to type.
pub fn unescape(text: &str) -> String {
    text.replace("\\n", "\n").replace("\\t", "\t")
}

/// One line after an answer: its speed, how much of the prompt was run versus taken from the
/// KV cache, and how full the context is.
pub fn stats_line(g: &Generation, reused: usize, used: usize, ctx: usize) -> String {
    let prompt = if reused > 0 {
        format!("{} new + {reused} cached", g.prefill_tokens)
    } else {
        g.prefill_tokens.to_string()
    };
    let reason = match g.finish_reason {
        FinishReason::Stop => "",
        FinishReason::Length => " · max tokens",
        FinishReason::Context => " · context full",
        FinishReason::Interrupted => " · stopped",
    };
    let spec = g.speculation.map_or(String::new(), |s| {
        format!(
            " · speculation {}/{} kept, {:.2} tokens/pass",
            s.accepted,
            s.proposed,
            g.tokens.len().saturating_sub(1) as f64 / s.passes.max(1) as f64
        )
    });
    // One token came from the prompt's logits: no decode speed to give.
    let decode = g
        .decode_tok_per_s()
        .map_or(String::new(), |r| format!(", {r:.1} tok/s"));
    let n = g.tokens.len();
    format!(
        "[{n} token{}{decode} · prompt {prompt}, {:.0} tok/s · context {used}/{ctx}{reason}{spec}]",
        if n == 1 { "" } else { "s" },
        g.prefill_tok_per_s(),
    )
}
