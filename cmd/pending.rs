//! Subcommands that are designed but not built yet. They say so and exit with code 3 rather
//! than pretend to work.

use clap::Args;
use std::process::ExitCode;

/// Arguments are accepted and ignored so that `--help` still works.
#[derive(Args)]
pub struct Pending {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

pub fn main(name: &str, issue: u32) -> anyhow::Result<ExitCode> {
    eprintln!("pocket {name}: not built yet (planned in issue #{issue}).");
    Ok(ExitCode::from(3))
}
