//! `--json-schema`, `--grammar`, `--regex`, `--choices` and `--tools` read into an
//! [`AnswerFormat`], with errors that name the flag and the file (and the place inside it).

use super::options::RunArgs;
use anyhow::{anyhow, Result};
use pocket::constrain::tools::{parse_tools, ToolChoice};
use pocket::constrain::{AnswerFormat, Constraint, ConstraintError};
use pocket::loader::LoadedModel;
use std::path::Path;

/// The answer format and the flag it came from ("--json-schema schema.json"), for messages.
pub struct FormatArg {
    pub format: AnswerFormat,
    pub origin: String,
    /// Building the grammar engine for the model's vocabulary and compiling the constraint
    /// (reported in --json: it is paid once per process).
    pub setup: std::time::Duration,
}

fn read(flag: &str, path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow!("{flag} {}: {e}", path.display()))
}

fn named(origin: &str, e: ConstraintError) -> anyhow::Error {
    anyhow!("{origin}: {}", e.0)
}

/// A schema argument: the schema itself when it looks like JSON, else a file.
pub fn schema_arg(flag: &str, arg: &str) -> Result<(Constraint, String)> {
    let trimmed = arg.trim_start();
    let (text, origin) = if trimmed.starts_with('{') || trimmed == "true" || trimmed == "false" {
        (arg.to_string(), format!("{flag} (inline schema)"))
    } else {
        (read(flag, Path::new(arg))?, format!("{flag} {arg}"))
    };
    let c = Constraint::json_schema_text(&text).map_err(|e| named(&origin, e))?;
    Ok((c, origin))
}

pub fn grammar_arg(flag: &str, path: &Path) -> Result<(Constraint, String)> {
    let origin = format!("{flag} {}", path.display());
    let c = Constraint::grammar(&read(flag, path)?).map_err(|e| named(&origin, e))?;
    Ok((c, origin))
}

pub fn choices_arg(flag: &str, labels: Vec<String>) -> Result<(Constraint, String)> {
    let c = Constraint::choices(labels).map_err(|e| named(flag, e))?;
    Ok((c, flag.to_string()))
}

/// Reads the flags; nothing here needs the model, so bad input fails before it loads.
pub fn from_args(args: &RunArgs) -> Result<Option<FormatArg>> {
    let constraint = if let Some(s) = &args.json_schema {
        Some(schema_arg("--json-schema", s)?)
    } else if let Some(p) = &args.grammar {
        Some(grammar_arg("--grammar", p)?)
    } else if let Some(re) = &args.regex {
        let c = Constraint::regex(re).map_err(|e| named("--regex", e))?;
        Some((c, "--regex".to_string()))
    } else if let Some(labels) = &args.choices {
        Some(choices_arg("--choices", labels.clone())?)
    } else {
        None
    };
    if let Some((c, origin)) = constraint {
        return Ok(Some(FormatArg {
            format: AnswerFormat {
                constraint: Some(c),
                ..AnswerFormat::default()
            },
            origin,
            setup: Default::default(),
        }));
    }
    let Some(path) = &args.tools else {
        return Ok(None);
    };
    let origin = format!("--tools {}", path.display());
    let tools = parse_tools(&read("--tools", path)?).map_err(|e| named(&origin, e))?;
    let tool_choice = ToolChoice::parse(&args.tool_choice);
    if let ToolChoice::Named(n) = &tool_choice {
        if !tools.iter().any(|t| &t.name == n) {
            return Err(anyhow!(
                "--tool-choice {n}: expected auto, required, none or a tool's name ({})",
                tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(Some(FormatArg {
        format: AnswerFormat {
            constraint: None,
            tools,
            tool_choice,
        },
        origin,
        setup: Default::default(),
    }))
}

/// Compiles the format for `m` once, so what the grammar engine refuses (an unimplemented
/// schema keyword, a grammar error) is reported before generation.
pub fn check(f: &mut FormatArg, m: &LoadedModel) -> Result<()> {
    let t = std::time::Instant::now();
    m.guide_for(&f.format).map_err(|e| named(&f.origin, e))?;
    f.setup = t.elapsed();
    Ok(())
}
