//! `--size` / `--bpw`: price every weight matrix on the calibration text
//! (`pocket::budget::price`), choose the types that fit the size with the least estimated loss
//! (`pocket_formats::budget::choose`), and write the choice into the recipe as one override per
//! tensor, so the file records it and `inspect` shows it.

use crate::quant_args::SizeTarget;
use anyhow::{bail, Context, Result};
use pocket::budget::{price, Target, CANDIDATES};
use pocket_formats::budget::{choose, TensorChoices};
use pocket_formats::convert::{planned_file_bytes, Importance};
use pocket_formats::model_file::ModelFile;
use pocket_formats::recipe::{glob_match, BudgetInfo, Recipe};
use std::path::Path;
use std::time::Instant;

/// Calibration tokens each tensor's effect is measured on: enough to rank tensors (every
/// tensor sees the same tokens, so the comparison is paired), few enough that pricing a 0.5B
/// model takes minutes.
pub const SENSITIVITY_TOKENS: usize = 256;

/// What the choice came to, for the report.
pub struct Fitted {
    pub target_bytes: u64,
    pub planned_bytes: u64,
    pub predicted_kl: f64,
    pub seconds: f64,
    /// (type, tensors) in the order of [`CANDIDATES`].
    pub counts: Vec<(String, usize)>,
    /// The recipe written, with the choice in its overrides.
    pub recipe: Recipe,
}

/// How tensors are priced: the calibration (weights and text, and where the text came from)
/// and where a measurement is kept (`--sensitivity`).
pub struct Measure<'a> {
    pub importance: &'a Importance,
    pub text: &'a str,
    pub origin: &'a str,
    pub saved: Option<&'a Path>,
}

/// A measurement kept for reuse (`--sensitivity FILE`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    /// What it was measured on: the calibration text's origin, the scale method and tokens.
    calibration: String,
    /// The calibration text's xxh3-64 (hex): the same text under another path is the same
    /// calibration, and an edited file at the same path is not. Absent in files written
    /// before it was recorded (then the origins are compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text_xxh3: Option<String>,
    method: String,
    tokens: usize,
    tensors: Vec<TensorChoices>,
}

/// The calibration text's fingerprint, as [`Saved::text_xxh3`] records it.
fn text_hash(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// The weight matrices a size budget chooses types for: every one of `source` not pinned by
/// `pins` (name patterns).
fn targets(source: &ModelFile, pins: &[String]) -> Vec<Target> {
    source
        .tensors()
        .iter()
        .filter(|t| pocket::budget::is_weight_matrix(&t.name))
        .filter(|t| !pins.iter().any(|p| glob_match(p, &t.name)))
        .filter_map(|t| match t.shape[..] {
            [rows, cols] => Some(Target {
                name: t.name.clone(),
                rows,
                cols,
            }),
            _ => None,
        })
        .collect()
}

/// Refuses a kept measurement (`--sensitivity`) that this export could not use, before the
/// calibration pass (minutes with `--gptq` and a long text) rather than after it.
pub fn check_saved(
    path: &Path,
    source: &ModelFile,
    pins: &[String],
    (text, origin): (&str, &str),
    method: pocket_formats::quant::search::Method,
) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let method = format!("{method:?}").to_lowercase();
    load_saved(path, &targets(source, pins), (text, origin), &method).map(|_| ())
}

/// A kept measurement, if it was made for these targets with this calibration and method.
fn load_saved(
    path: &Path,
    targets: &[Target],
    (text, origin): (&str, &str),
    method: &str,
) -> Result<Saved> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let s: Saved = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a --sensitivity file of pocket's", path.display()))?;
    let same_text = match &s.text_xxh3 {
        Some(h) => *h == text_hash(text),
        None => s.calibration == origin,
    };
    if !same_text || s.method != method {
        let changed = s.calibration == origin && s.method == method;
        bail!(
            "{}: measured with calibration `{}`{} and method {}, not `{}` and {method}; \
             delete it or give another file",
            path.display(),
            s.calibration,
            if changed {
                " (its text has changed since)"
            } else {
                ""
            },
            s.method,
            origin,
        );
    }
    let same = s.tensors.len() == targets.len()
        && s.tensors.iter().zip(targets).all(|(m, t)| {
            m.name == t.name
                && !m.choices.is_empty()
                && m.choices.iter().all(|c| {
                    c.cost.is_finite()
                        && c.cost >= 0.0
                        && c.dtype.byte_size(t.rows, t.cols) == Some(c.bytes as usize)
                })
        });
    // A file from a pocket with other candidate types would silently narrow the choice.
    let current = s.tensors.iter().zip(targets).all(|(m, t)| {
        CANDIDATES
            .iter()
            .filter(|c| c.byte_size(t.rows, t.cols).is_some())
            .all(|c| m.choices.iter().any(|m| m.dtype == *c))
            && m.choices.iter().all(|m| CANDIDATES.contains(&m.dtype))
    });
    if same && !current {
        bail!(
            "{}: measured for other storage types than this pocket chooses from ({}); \
             delete it or give another file",
            path.display(),
            CANDIDATES.map(|c| c.to_string()).join(", ")
        );
    }
    if !same {
        bail!(
            "{}: measured for another model (its weight matrices differ from this one's); \
             delete it or give another file",
            path.display()
        );
    }
    Ok(s)
}

/// Chooses the type of every weight matrix not pinned by `pins` (name patterns) so the file
/// written from `recipe` fits `target`, and records the choice in `recipe`.
pub fn fit(
    input: &Path,
    source: &ModelFile,
    recipe: &mut Recipe,
    how: &Measure,
    target: SizeTarget,
    pins: &[String],
    quiet: bool,
) -> Result<Fitted> {
    let start = Instant::now();
    let tensors = source.tensors();
    let parameters: u64 = tensors
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum();
    let target_bytes = match target {
        SizeTarget::Bytes(b) => b,
        SizeTarget::BitsPerParameter(bits) => (bits * parameters as f64 / 8.0) as u64,
    };
    let targets = targets(source, pins);
    if targets.is_empty() {
        bail!(
            "{}: no weight matrices to choose types for",
            input.display()
        );
    }
    let method = format!("{:?}", recipe.method).to_lowercase();
    let (priced, tokens) = match how.saved.filter(|p| p.exists()) {
        Some(path) => {
            let s = load_saved(path, &targets, (how.text, how.origin), &method)?;
            (s.tensors, s.tokens)
        }
        None => {
            let (mut model, _) =
                crate::settings::open_model(input, crate::settings::load_options(true)?)?;
            let tokens =
                pocket::calibrate::calibration_tokens(&model, how.text, SENSITIVITY_TOKENS)?;
            let ticker = crate::convert::Ticker::new(quiet, "measuring each weight matrix");
            let priced = price(
                &mut model,
                &targets,
                &CANDIDATES,
                recipe.method,
                how.importance,
                &tokens,
                &|d, t, n| ticker.tick(d as u64, t as u64, n),
            )
            .context("measuring each weight matrix's effect on the model")?;
            ticker.finish();
            if let Some(path) = how.saved {
                let s = Saved {
                    calibration: how.origin.to_string(),
                    text_xxh3: Some(text_hash(how.text)),
                    method: method.clone(),
                    tokens: tokens.len(),
                    tensors: priced,
                };
                pocket_formats::atomic::write_atomic(path, &serde_json::to_vec(&s)?)
                    .with_context(|| format!("{}: cannot write", path.display()))?;
                (s.tensors, s.tokens)
            } else {
                (priced, tokens.len())
            }
        }
    };

    let base_overrides = recipe.overrides.clone();
    let with = |picks: &[usize]| -> Recipe {
        let mut r = recipe.clone();
        r.overrides = base_overrides.clone();
        r.overrides.extend(
            priced
                .iter()
                .zip(picks)
                .map(|(t, &i)| (t.name.clone(), t.choices[i].dtype)),
        );
        r
    };
    // The bytes outside the chosen tensors, from the file planned with each at its smallest.
    let smallest: Vec<usize> = priced.iter().map(smallest_choice).collect();
    let small_file = planned_file_bytes(source, &with(&smallest))?;
    let small_sum: u64 = priced
        .iter()
        .zip(&smallest)
        .map(|(t, &i)| t.choices[i].bytes)
        .sum();
    if small_file > target_bytes {
        bail!(
            "{}: the smallest types that fit ({} where the shape allows) make a {:.2} MB file, \
             over the {:.2} MB asked for",
            describe(target),
            CANDIDATES[0],
            small_file as f64 / 1e6,
            target_bytes as f64 / 1e6
        );
    }
    let fixed = small_file - small_sum;
    // Alignment padding and the header's type names move a little with the choice: plan,
    // check the planned file, and shrink the tensors' budget by any excess.
    let mut budget = (target_bytes - fixed).saturating_sub(64 * priced.len() as u64);
    for _ in 0..4 {
        let plan = choose(&priced, budget).map_err(|e| anyhow::anyhow!("{e}"))?;
        let r = with(&plan.picks);
        let planned = planned_file_bytes(source, &r)?;
        if planned <= target_bytes {
            let mut counts: Vec<(String, usize)> = CANDIDATES
                .iter()
                .map(|c| {
                    let n = priced
                        .iter()
                        .zip(&plan.picks)
                        .filter(|(t, &i)| t.choices[i].dtype == *c)
                        .count();
                    (c.to_string(), n)
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            counts.sort_by_key(|c| std::cmp::Reverse(c.1));
            *recipe = r;
            recipe.budget = Some(BudgetInfo {
                target_bytes,
                candidates: CANDIDATES.to_vec(),
                predicted_kl: plan.cost,
                tokens,
            });
            return Ok(Fitted {
                target_bytes,
                planned_bytes: planned,
                predicted_kl: plan.cost,
                seconds: start.elapsed().as_secs_f64(),
                counts,
                recipe: recipe.clone(),
            });
        }
        budget = budget.saturating_sub(planned - target_bytes);
    }
    bail!(
        "{}: could not fit the plan into {} bytes",
        describe(target),
        target_bytes
    )
}

fn smallest_choice(t: &TensorChoices) -> usize {
    (0..t.choices.len())
        .min_by_key(|&i| t.choices[i].bytes)
        .expect("priced tensors have choices")
}

fn describe(t: SizeTarget) -> String {
    match t {
        SizeTarget::Bytes(b) => format!("--size {:.2}MB", b as f64 / 1e6),
        SizeTarget::BitsPerParameter(b) => format!("--bpw {b}"),
    }
}
