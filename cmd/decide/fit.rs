//! `pocket decide fit`: calibration and heads from labelled samples, and the scoring that
//! `pocket eval decide` shares.
//!
//! Rows are JSON lines `{"state", "question": {"type", "instructions", "criteria"}, "gold"}`
//! (`gold`: a choice key, true/false, or a level index). They are shuffled with a fixed seed
//! and split: the first part fits, the rest reports (before and after), so every figure is
//! on rows the fit never saw.

use super::AskArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pocket::decide::fit::{
    fit_position_bias, fit_temperature, metrics, train_probe, Metrics, Scored,
};
use pocket::decide::head::question_signature;
use pocket::decide::{Decider, Head, Kind, Request, Style, Temperatures, Weights};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
#[command(after_help = "\
Rows: one JSON object per line, {\"state\": …, \"question\": {\"type\": \"choice\", \
\"instructions\": …, \"criteria\": {…}}, \"gold\": \"refund\"}; gold is a choice key, true or \
false for noul, a level index for score.

The rows are shuffled (--seed) and split (--split): temperatures and heads are fitted on the \
first part and every reported figure comes from the rest.

Example:
  pocket decide fit MODEL --data examples/intent/decisions.jsonl -o intent.head --train-head")]
pub struct FitArgs {
    /// HF checkpoint directory, .pocket file or GGUF file
    pub model: PathBuf,
    /// Labelled rows (JSON lines)
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Where to write the head (safetensors)
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Also train a probe head on the model's hidden state at the decision position (every
    /// row must ask the same question)
    #[arg(long)]
    pub train_head: bool,
    /// The fraction of rows that fit; the rest report (1: fit on every row and report
    /// nothing, to score the head on other data with `pocket eval decide --head`)
    #[arg(long, default_value_t = 0.5)]
    pub split: f64,
    /// Also fit a bias by the position each option is shown at, with the temperature (a small
    /// model's preference for the first option, or for "A", cancelled)
    #[arg(long)]
    pub position_bias: bool,
    /// The shuffle's seed
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub ask: AskArgs,
}

/// One labelled row.
pub struct Row {
    pub req: Request,
    pub gold: usize,
    pub line: usize,
}

/// Reads labelled rows, naming the line of any problem.
pub fn read_rows(path: &Path, decider: &Decider) -> Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let v: Value =
            serde_json::from_str(line).map_err(|e| anyhow!("{}: not JSON ({e})", at()))?;
        let body = json!({"state": v.get("state").cloned().unwrap_or(Value::Null),
                          "questions": {"q": v.get("question").cloned().unwrap_or(Value::Null)}});
        let req = decider
            .parse(&body)
            .map_err(|e| anyhow!("{}: {}", at(), e[0].line()))?;
        let q = &req.questions[0];
        let gold = v
            .get("gold")
            .ok_or_else(|| anyhow!("{}: no \"gold\"", at()))?;
        let g = match (q.kind, gold) {
            (Kind::Choice, Value::String(k)) => q.options.iter().position(|o| &o.key == k),
            (Kind::Noul, Value::Bool(b)) => Some(*b as usize),
            (Kind::Noul, Value::String(s)) => match s.to_lowercase().as_str() {
                "true" | "yes" => Some(1),
                "false" | "no" => Some(0),
                _ => None,
            },
            (Kind::Score, Value::Number(n)) => n
                .as_u64()
                .map(|n| n as usize)
                .filter(|&n| n < q.options.len()),
            _ => None,
        };
        let gold = g.ok_or_else(|| {
            anyhow!(
                "{}: gold {gold} is not an option of this {} question",
                at(),
                q.kind.name()
            )
        })?;
        rows.push(Row {
            req,
            gold,
            line: i + 1,
        });
    }
    if rows.is_empty() {
        bail!("{}: no rows", path.display());
    }
    Ok(rows)
}

/// Progress over rows: a bar on a terminal, a line every tenth when piped, nothing with
/// --json.
pub struct Progress {
    bar: Option<ProgressBar>,
    piped: bool,
    len: usize,
    done: usize,
    what: String,
}

impl Progress {
    pub fn new(len: usize, what: &str, quiet: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = (!quiet && terminal).then(|| {
            let b = ProgressBar::new(len as u64);
            b.set_style(
                ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} ({eta} left)")
                    .expect("a valid template"),
            );
            b.set_message(what.to_string());
            b
        });
        Progress {
            bar,
            piped: !quiet && !terminal,
            len,
            done: 0,
            what: what.to_string(),
        }
    }

    pub fn inc(&mut self) {
        self.done += 1;
        if let Some(b) = &self.bar {
            b.inc(1);
        } else if self.piped
            && (self.done * 10 / self.len.max(1) != (self.done - 1) * 10 / self.len.max(1))
        {
            eprintln!("{}: {}/{}", self.what, self.done, self.len);
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Every row's readout (one pass each, the previous row's shared tokens reused), and its last
/// hidden state when `hidden`.
pub fn score_rows(
    decider: &Decider,
    rows: &[Row],
    ctx: usize,
    hidden: bool,
    quiet: bool,
) -> Result<(Vec<Scored>, Vec<Vec<f32>>)> {
    let m = decider.model;
    let mut state = m.model.new_state(ctx);
    let mut cached = Vec::new();
    let mut progress = Progress::new(rows.len(), "scoring", quiet);
    let mut scored = Vec::with_capacity(rows.len());
    let mut features = Vec::new();
    for row in rows {
        let plan = decider
            .plan(&row.req, ctx)
            .with_context(|| format!("row on line {}", row.line))?;
        let (s, _) = decider.run(&mut state, &mut cached, &plan, hidden)?;
        let variants = plan
            .variants
            .iter()
            .zip(&s.raw)
            .map(|(v, r)| (r.clone(), v.reversed))
            .collect();
        if hidden {
            features.push(s.hidden.last().cloned().unwrap_or_default());
        }
        scored.push(Scored {
            kind: row.req.questions[0].kind,
            variants,
            gold: row.gold,
        });
        progress.inc();
    }
    progress.finish();
    Ok((scored, features))
}

/// Metrics of `rows` with each kind's temperature from `temps`.
pub fn metrics_with(rows: &[&Scored], temps: &Temperatures) -> Metrics {
    let probs: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| {
            let t = temps.get(r.kind, r.variants[0].0.len());
            pocket::decide::answer::probabilities_with(&r.variants, t, temps.bias(r.kind))
        })
        .collect();
    let gold: Vec<usize> = rows.iter().map(|r| r.gold).collect();
    metrics(&probs, &gold)
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        idx.swap(i, (s % (i as u64 + 1)) as usize);
    }
    idx
}

pub fn main(a: FitArgs) -> Result<ExitCode> {
    if !(a.split > 0.0 && a.split <= 1.0) {
        bail!(
            "--split {}: expected a fraction above 0, at most 1",
            a.split
        );
    }
    let mut settings = a.ask.settings()?;
    if settings.head.is_some() {
        bail!("decide fit starts from the zero-shot readout; leave out --head");
    }
    if matches!(settings.style, Some(Style::Pointer | Style::Probe)) {
        bail!("--readout {}: fit needs a zero-shot readout (keys or letters); --train-head trains a probe", a.ask.how.readout.as_deref().unwrap_or(""));
    }
    let t0 = Instant::now();
    let (m, ctx) = a.ask.load(&a.model)?;
    settings.head = None;
    let decider = Decider::new(&m, settings)?;
    let rows = read_rows(&a.data, &decider)?;
    let order = shuffled(rows.len(), a.seed);
    if rows.len() < 2 {
        bail!("{}: fitting needs at least 2 rows", a.data.display());
    }
    let cut = if a.split >= 1.0 {
        rows.len()
    } else {
        ((rows.len() as f64 * a.split).round() as usize).clamp(1, rows.len() - 1)
    };
    let signature = question_signature(&rows[0].req.questions[0]);
    if a.train_head {
        if let Some(r) = rows
            .iter()
            .find(|r| question_signature(&r.req.questions[0]) != signature)
        {
            bail!(
                "{}:{}: --train-head trains a probe for one question; this row asks another",
                a.data.display(),
                r.line
            );
        }
    }
    let (scored, features) = score_rows(&decider, &rows, ctx, a.train_head, a.json)?;
    let fit_set: Vec<usize> = order[..cut].to_vec();
    let report: Vec<usize> = order[cut..].to_vec();
    let pick = |ix: &[usize]| ix.iter().map(|&i| &scored[i]).collect::<Vec<_>>();
    // Temperatures per question type, fitted on the fit split.
    let mut temps = Temperatures::default();
    let kinds: Vec<Kind> = {
        let mut k: Vec<Kind> = scored.iter().map(|s| s.kind).collect();
        k.dedup();
        k.sort_by_key(|k| k.name());
        k.dedup();
        k
    };
    for kind in &kinds {
        let rows_k: Vec<&Scored> = fit_set
            .iter()
            .map(|&i| &scored[i])
            .filter(|s| s.kind == *kind)
            .collect();
        if rows_k.is_empty() {
            continue;
        }
        if a.position_bias {
            let (t, bias) = fit_position_bias(&rows_k);
            temps.by_name.insert(kind.name().to_string(), t);
            temps.position_bias.insert(kind.name().to_string(), bias);
        } else {
            temps
                .by_name
                .insert(kind.name().to_string(), fit_temperature(&rows_k));
        }
    }
    let before = metrics_with(&pick(&report), &Temperatures::default());
    let after = metrics_with(&pick(&report), &temps);
    let mut report_json = json!({
        "rows": rows.len(), "fit_rows": fit_set.len(), "report_rows": report.len(),
        "readout": decider.style().name(), "order": decider.order().name(),
        "temperatures": temps.by_name,
        "position_bias": temps.position_bias,
        "zero_shot": before, "calibrated": after,
    });
    let mut head = Head {
        style: decider.style(),
        order: decider.order(),
        reverse: decider.reverse,
        hidden: m.model.spec.hidden_size,
        temperatures: temps.clone(),
        weights: Weights::None,
        notes: BTreeMap::new(),
    };
    if a.train_head {
        let q = &rows[0].req.questions[0];
        let classes: Vec<String> = q.options.iter().map(|o| o.key.clone()).collect();
        let train = |ix: &[usize]| {
            let x: Vec<Vec<f32>> = ix.iter().map(|&i| features[i].clone()).collect();
            let y: Vec<usize> = ix.iter().map(|&i| rows[i].gold).collect();
            train_probe(&x, &y, classes.len())
        };
        let eval = |p: &pocket::decide::fit::Probe| -> Metrics {
            let dim = m.model.spec.hidden_size;
            let probs: Vec<Vec<f64>> = report
                .iter()
                .map(|&i| {
                    let logits: Vec<f64> = (0..classes.len())
                        .map(|c| {
                            p.w[c * dim..(c + 1) * dim]
                                .iter()
                                .zip(&features[i])
                                .map(|(&w, &x)| w as f64 * x as f64)
                                .sum::<f64>()
                                + p.b[c] as f64
                        })
                        .collect();
                    pocket::decide::answer::softmax_at(&logits, 1.0)
                })
                .collect();
            let gold: Vec<usize> = report.iter().map(|&i| rows[i].gold).collect();
            metrics(&probs, &gold)
        };
        // Accuracy as the training rows grow: the first k fit rows of each label.
        let mut curve = Vec::new();
        for k in [1usize, 2, 5, 10, 20, 50, 100, usize::MAX] {
            let mut per: BTreeMap<usize, usize> = BTreeMap::new();
            let ix: Vec<usize> = fit_set
                .iter()
                .copied()
                .filter(|&i| {
                    let c = per.entry(rows[i].gold).or_default();
                    *c += 1;
                    *c <= k
                })
                .collect();
            if k != usize::MAX && ix.len() == fit_set.len() {
                break;
            }
            let p = train(&ix);
            let met = eval(&p);
            curve.push(json!({"per_label": if k == usize::MAX { Value::from("all") } else { Value::from(k) },
                              "train_rows": ix.len(), "l2": p.l2, "report": met}));
        }
        let probe = train(&fit_set);
        let met = eval(&probe);
        report_json["probe"] = json!(met);
        report_json["probe_curve"] = Value::Array(curve);
        head.style = Style::Probe;
        head.temperatures = Temperatures::default();
        head.weights = Weights::Probe {
            classes,
            w: probe.w,
            b: probe.b,
            question: signature,
        };
    }
    head.notes
        .insert("model".into(), super::model_name(&a.model));
    head.notes.insert("report".into(), report_json.to_string());
    head.save(&a.output)?;
    report_json["seconds"] = json!(t0.elapsed().as_secs_f64());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report_json)?);
    } else {
        print_report(&report_json, &a.output);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &Value, out: &Path) {
    let line = |name: &str, m: &Value| {
        println!(
            "  {name:<22} accuracy {:>6.2} %   log loss {:.4}   Brier {:.4}   ECE {:.4}",
            m["accuracy"].as_f64().unwrap_or(0.0) * 100.0,
            m["log_loss"].as_f64().unwrap_or(0.0),
            m["brier"].as_f64().unwrap_or(0.0),
            m["ece"].as_f64().unwrap_or(0.0)
        )
    };
    println!(
        "{} rows: {} fit, {} report · {} readout, {}",
        r["rows"],
        r["fit_rows"],
        r["report_rows"],
        r["readout"].as_str().unwrap_or(""),
        r["order"].as_str().unwrap_or("")
    );
    if let Some(t) = r["temperatures"].as_object() {
        for (k, v) in t {
            println!("  temperature.{k} = {:.4}", v.as_f64().unwrap_or(1.0));
        }
    }
    if r["report_rows"] == 0 {
        println!("No rows held out (--split 1): score the head with `pocket eval decide --head`");
        println!("wrote {}", out.display());
        return;
    }
    println!("On the {} report rows:", r["report_rows"]);
    line("zero-shot", &r["zero_shot"]);
    let fitted = match r["position_bias"]
        .as_object()
        .is_some_and(|b| !b.is_empty())
    {
        true => "temperature + position",
        false => "fitted temperature",
    };
    line(fitted, &r["calibrated"]);
    if !r["probe"].is_null() {
        line("probe head", &r["probe"]);
        if let Some(c) = r["probe_curve"].as_array() {
            for p in c {
                line(
                    &format!("  probe, {} per label", p["per_label"]).replace('"', ""),
                    &p["report"],
                );
            }
        }
    }
    println!("wrote {}", out.display());
}
