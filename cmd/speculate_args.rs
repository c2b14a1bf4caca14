//! `--speculate`, `--draft`, `--draft-tokens` and `--ngram`: the speculative-decoding flags
//! `run`, `bench` and `eval` share, and the draft model they load.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use pocket::loader::LoadedModel;
use pocket::speculate::{check_draft, Speculator};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// Plain decoding
    Off,
    /// Proposals from n-grams of the prompt and the answer so far (prompt-lookup decoding)
    Lookup,
    /// Proposals from a smaller build with the same tokenizer (--draft)
    Draft,
}

#[derive(Args, Clone, Debug)]
pub struct SpecArgs {
    /// Speculative decoding: several tokens verified per pass, the same output token for token
    /// (greedy or sampled). lookup: proposals from the prompt and answer so far (copying
    /// tasks: extraction, rewriting, edits); draft: from --draft MODEL
    #[arg(
        long,
        value_enum,
        default_value = "off",
        default_value_if("draft", clap::builder::ArgPredicate::IsPresent, "draft"),
        help_heading = "Speculative decoding"
    )]
    pub speculate: Method,
    /// The draft model for --speculate draft: a smaller or lower-precision build with the same
    /// tokenizer (e.g. the Q4 build of a Q8 or bf16 model)
    #[arg(long, value_name = "MODEL", help_heading = "Speculative decoding")]
    pub draft: Option<PathBuf>,
    /// Propose exactly N tokens per pass (1-15) instead of as many as the measured acceptance
    /// and pass cost say pay (the default, which proposes none where they would not)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=15), help_heading = "Speculative decoding", hide_short_help = true)]
    pub draft_tokens: Option<u32>,
    /// Longest n-gram --speculate lookup matches (1-8)
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=8), help_heading = "Speculative decoding", hide_short_help = true)]
    pub ngram: u32,
}

impl SpecArgs {
    /// Checks the flags agree and loads the draft model (after the target, checked against
    /// its tokenizer).
    pub fn load_draft(
        &self,
        target: &LoadedModel,
        options: pocket::loader::LoadOptions,
    ) -> Result<Option<LoadedModel>> {
        match (self.speculate, &self.draft) {
            (Method::Draft, None) => {
                anyhow::bail!("--speculate draft needs --draft MODEL (a smaller build with the same tokenizer)")
            }
            (Method::Off | Method::Lookup, Some(_)) => {
                anyhow::bail!("--draft is for --speculate draft")
            }
            (Method::Draft, Some(path)) => {
                let d = LoadedModel::open_with(path, options)
                    .with_context(|| format!("the draft model {}", path.display()))?;
                check_draft(target, &d)?;
                Ok(Some(d))
            }
            _ => Ok(None),
        }
    }

    /// The speculator these flags ask for `target` (`None`: plain decoding). `draft` is what
    /// [`SpecArgs::load_draft`] loaded; its cache holds up to `ctx` positions.
    pub fn speculator<'m>(
        &self,
        target: &LoadedModel,
        draft: Option<&'m LoadedModel>,
        ctx: usize,
    ) -> Option<Speculator<'m>> {
        let s = match (self.speculate, draft) {
            (Method::Off, _) => return None,
            (Method::Lookup, _) => Speculator::lookup(self.ngram as usize),
            (Method::Draft, Some(d)) => Speculator::draft(&target.model, &d.model, ctx),
            (Method::Draft, None) => return None,
        };
        Some(match self.draft_tokens {
            Some(k) => s.fixed(k as usize),
            None => s,
        })
    }

    pub fn on(&self) -> bool {
        self.speculate != Method::Off
    }
}
