//! `pocket eval ppl`: perplexity of a model on a text, and with `--baseline` the drift of its
//! next-token distribution from another build's on the same tokens.

use super::engine::Engine;
use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pocket::loader::LoadedModel;
use pocket_evals::ppl::{perplexity, PplOptions};
use pocket_evals::LogitModel;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct PplArgs {
    /// Model: an HF checkpoint directory or a .pocket file
    pub model: PathBuf,
    /// UTF-8 text file to score
    #[arg(long, required_unless_present = "tokens", conflicts_with = "tokens")]
    pub text: Option<PathBuf>,
    /// Score these token ids instead of a text: a JSON array (e.g. another engine's
    /// tokenization, to compare on exactly the same tokens)
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// A second build of the same model (e.g. the bf16 checkpoint) to compare against; the
    /// same file with --baseline-kv measures what a KV cache type costs
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// The baseline's KV cache type (default: the model's, from --kv): e.g. `--kv q8
    /// --baseline-kv f32 --baseline MODEL` is the int8 cache's drift from the f32 one
    #[arg(long, requires = "baseline", value_parser = parse_kv)]
    pub baseline_kv: Option<pocket::config::KvPrecision>,
    /// The baseline's activation precision (default: the model's): `--baseline MODEL
    /// --baseline-activations f32 --baseline-kv f32` is the fast path's drift from the exact
    /// path on the same file
    #[arg(long, requires = "baseline", value_enum)]
    pub baseline_activations: Option<crate::ActivationsArg>,
    /// Window length: the text is scored in independent windows of this many tokens
    #[arg(long, default_value_t = 512)]
    pub ctx: usize,
    /// Score at most this many tokens of the text
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Open every window with the BOS token (not scored): `auto` does when the model's
    /// tokenizer puts BOS before a text (Gemma: its perplexity without one is meaningless;
    /// as lm-evaluation-harness's rolling windows)
    #[arg(long, value_enum, default_value_t = BosPrefix::Auto)]
    pub bos: BosPrefix,
    /// Print one JSON object: {ppl, nll_mean, tokens, kld_mean, top1_agree, ...}
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BosPrefix {
    Auto,
    Yes,
    No,
}

/// The token the tokenizer puts before an encoded text, if any.
fn bos_of(m: &LoadedModel) -> Result<Option<u32>> {
    let plain = m.tokenizer.encode("a", false)?;
    let special = m.tokenizer.encode("a", true)?;
    Ok((special.len() > plain.len() && special.ends_with(&plain)).then(|| special[0]))
}

fn parse_kv(s: &str) -> Result<pocket::config::KvPrecision, String> {
    pocket::config::KvPrecision::parse(s).ok_or_else(|| format!("{s}: expected f16, f32, q8 or q4"))
}

pub fn main(a: PplArgs) -> Result<ExitCode> {
    if a.ctx < 2 {
        bail!("--ctx must be at least 2");
    }
    let (m, _) = crate::settings::open_model(&a.model, crate::settings::load_options(true)?)?;
    let base = match a.baseline.as_deref() {
        Some(p) => {
            let mut options = crate::settings::load_options(true)?;
            if let Some(kv) = a.baseline_kv {
                options.config.kv = kv;
            }
            if let Some(act) = a.baseline_activations {
                options.config.activations = act.into();
            }
            Some(LoadedModel::open_with(p, options)?)
        }
        None => None,
    };
    let mut tokens = match (&a.text, &a.tokens) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let tokens = m.tokenizer.encode(&text, true)?;
            if let Some(b) = &base {
                if b.tokenizer.encode(&text, true)? != tokens {
                    bail!(
                        "{} and {} tokenize the text differently: not builds of the same model",
                        a.model.display(),
                        b.path.display()
                    );
                }
            }
            tokens
        }
        (None, Some(path)) => {
            let raw = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let ids: Vec<u32> = serde_json::from_str(&raw).with_context(|| {
                format!("{}: expected a JSON array of token ids", path.display())
            })?;
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= m.model.spec.vocab_size) {
                bail!(
                    "{}: token id {bad} is outside the vocabulary ({})",
                    path.display(),
                    m.model.spec.vocab_size
                );
            }
            ids
        }
        (None, None) => bail!("give --text FILE or --tokens FILE"),
    };
    let prefix =
        match a.bos {
            BosPrefix::No => None,
            BosPrefix::Auto => bos_of(&m)?,
            BosPrefix::Yes => Some(bos_of(&m)?.or(m.model.spec.bos_token_id).ok_or_else(|| {
                anyhow::anyhow!("{}: the model has no BOS token", a.model.display())
            })?),
        };
    if let Some(b) = prefix {
        // The text's own leading BOS becomes the first window's prefix, not a scored token.
        if tokens.first() == Some(&b) {
            tokens.remove(0);
        }
    }
    if let Some(n) = a.max_tokens {
        tokens.truncate(n);
    }
    let ctx = a.ctx.min(m.model.spec.max_position_embeddings);
    let mut engine = Engine::new(&m, ctx);
    let mut base_engine = base.as_ref().map(|b| Engine::new(b, ctx));
    let bar = if a.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(tokens.len() as u64);
        b.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} tokens {per_sec} ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let start = std::time::Instant::now();
    let report = perplexity(
        &mut engine,
        base_engine.as_mut().map(|e| e as &mut dyn LogitModel),
        &tokens,
        &PplOptions {
            window: ctx,
            chunk: 64,
            prefix,
        },
        &|done, _| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["model"] = serde_json::json!(m.path);
        v["baseline"] = serde_json::json!(a.baseline);
        v["text"] = serde_json::json!(a.text.as_ref().or(a.tokens.as_ref()));
        v["ctx"] = serde_json::json!(ctx);
        v["bos_prefix"] = serde_json::json!(prefix);
        v["seconds"] = serde_json::json!(secs);
        println!("{v}");
    } else {
        println!(
            "perplexity {:.4} (mean NLL {:.5}) over {} tokens in {} windows of {ctx}{} ({secs:.0} s)",
            report.ppl,
            report.nll_mean,
            report.tokens,
            report.windows,
            if prefix.is_some() { ", each opened with BOS" } else { "" }
        );
        if let (Some(k), Some(t), Some(bp)) =
            (report.kld_mean, report.top1_agree, report.baseline_ppl)
        {
            println!("baseline perplexity {bp:.4}; mean KL(baseline ‖ model) {k:.6}; top-1 agreement {:.2}%", t * 100.0);
        }
    }
    Ok(ExitCode::SUCCESS)
}
