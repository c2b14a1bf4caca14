//! `pocket inspect`: what a model file holds, for people (text) and scripts (`--json`).

use crate::term::thousands;
use anyhow::{bail, Result};
use clap::Args;
use pocket::loader::{LoadedModel, ModelFile};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct InspectArgs {
    /// Model: an HF checkpoint directory, a .pocket file or a GGUF file; or a LoRA adapter (a
    /// PEFT directory or a GGUF LoRA file): its modules, ranks and alpha
    pub model: PathBuf,
    /// Print one JSON object instead of text (always with every tensor and metadata key)
    #[arg(long)]
    pub json: bool,
    /// Also print the per-tensor table (name, type, shape, bytes, offset)
    #[arg(long)]
    pub tensors: bool,
    /// Also print a GGUF's metadata keys (the tokenizer's arrays left out)
    #[arg(long)]
    pub metadata: bool,
    /// The summary alone (the default; kept for scripts written for older versions)
    #[arg(long, hide = true)]
    pub no_tensors: bool,
    /// Check every tensor's checksum (.pocket files); exit 1 if any is damaged
    #[arg(long)]
    pub verify: bool,
    /// Write one tensor's values, dequantized to little-endian f32 in the file's own element
    /// order, to the file given by --to (GGUF names for GGUF files; for cross-checking
    /// with other tools such as gguf-py)
    #[arg(long, value_name = "TENSOR", requires = "to")]
    pub dump: Option<String>,
    /// Output file for --dump
    #[arg(long, value_name = "FILE")]
    pub to: Option<PathBuf>,
}

/// `--dump`: a tensor's values as raw f32, in stored order.
fn dump(
    file: &ModelFile,
    path: &std::path::Path,
    name: &str,
    to: &std::path::Path,
) -> Result<ExitCode> {
    let values: Vec<f32> = match file {
        ModelFile::Gguf { file: g, .. } => {
            let t = g
                .tensor(name)
                .ok_or_else(|| anyhow::anyhow!("{}: no tensor `{name}`", path.display()))?;
            let mut v = vec![0.0f32; t.numel() as usize];
            pocket_formats::gguf::ggml::dequantize(t.ty, t.data.as_slice(), &mut v);
            v
        }
        // By HF name, stored row order.
        ModelFile::Pocket(_) | ModelFile::Hf { .. } => file.stored(name)?.to_f32()?,
    };
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    pocket_formats::atomic::write_atomic(to, &bytes)?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` is a LoRA adapter: a PEFT directory, or a GGUF whose `general.type` is
/// `adapter`.
fn is_adapter(path: &std::path::Path) -> bool {
    if path.is_dir() {
        return path.join("adapter_config.json").is_file();
    }
    pocket_formats::gguf::reader::GgufFile::sniff(path)
        && pocket_formats::gguf::reader::GgufFile::open(path)
            .is_ok_and(|f| f.get("general.type").and_then(|v| v.as_str()) == Some("adapter"))
}

/// An adapter's modules, ranks, alpha and scales.
fn adapter(args: &InspectArgs) -> Result<ExitCode> {
    let a = pocket_formats::lora::open(&args.model)?;
    let mut ranks: BTreeMap<usize, usize> = BTreeMap::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for m in &a.modules {
        *ranks.entry(m.rank).or_default() += 1;
        let kind = m.target.rsplit('.').nth(1).unwrap_or(&m.target).to_string();
        *kinds.entry(kind).or_default() += 1;
    }
    let params: usize = a.modules.iter().map(|m| m.a.len() + m.b.len()).sum();
    if args.json {
        let modules: Vec<_> = a
            .modules
            .iter()
            .map(|m| {
                json!({"target": m.target, "rank": m.rank, "scale": m.scale,
                            "in": m.cols, "out": m.rows, "embedding": m.embedding})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "path": args.model.display().to_string(), "format": a.source.name(),
                "base": a.base, "architecture": a.architecture, "alpha": a.alpha,
                "rslora": a.rslora, "parameters": params, "modules": modules,
                "replaced": a.replaced.iter().map(|r| &r.target).collect::<Vec<_>>(),
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}: {} LoRA adapter", args.model.display(), a.source.name());
    if let Some(b) = &a.base {
        println!("  base: {b}");
    }
    println!(
        "  {} modules, {} parameters; alpha {}{}",
        a.modules.len(),
        thousands(params as u64),
        a.alpha,
        if a.rslora {
            " (rsLoRA: scale alpha/sqrt(r))"
        } else {
            ""
        }
    );
    let show = |m: &BTreeMap<_, usize>| -> String {
        m.iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  targets: {}", show(&kinds));
    let ranks: BTreeMap<String, usize> = ranks
        .into_iter()
        .map(|(r, n)| (format!("r{r}"), n))
        .collect();
    println!("  ranks: {}", show(&ranks));
    let scales: std::collections::BTreeSet<String> = a
        .modules
        .iter()
        .map(|m| format!("{:.4}", m.scale))
        .collect();
    println!(
        "  scales: {}",
        scales.into_iter().collect::<Vec<_>>().join(", ")
    );
    if !a.replaced.is_empty() {
        let r: Vec<&str> = a.replaced.iter().map(|r| r.target.as_str()).collect();
        println!("  replaces whole: {}", r.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn main(args: InspectArgs) -> Result<ExitCode> {
    if is_adapter(&args.model) {
        return adapter(&args);
    }
    if let (Some(name), Some(to)) = (&args.dump, &args.to) {
        // The file alone: no tokenizer or model to build for one tensor.
        let file = ModelFile::open(&args.model)?;
        return dump(&file, &args.model, name, to);
    }
    // Damage is reported by --verify below, not refused at load.
    let unchecked = crate::settings::load_options(false)?;
    let m = LoadedModel::open_with(&args.model, unchecked)?;
    let spec = m.file.spec();
    let table = m.file.tensor_table();
    let params = m.file.parameter_count();
    let mut by_dtype: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in &table {
        let e = by_dtype.entry(t.dtype.clone()).or_default();
        e.0 += t.shape.iter().product::<usize>() as u64;
        e.1 += t.bytes;
    }
    let weight_bytes: u64 = table.iter().map(|t| t.bytes).sum();
    let damaged = match (&m.file, args.verify) {
        (ModelFile::Pocket(p), true) => Some(p.verify()),
        (ModelFile::Hf { .. }, true) => bail!(
            "--verify checks .pocket checksums; {} is an HF checkpoint",
            m.path.display()
        ),
        _ => None,
    };
    let (format, extra) = match &m.file {
        ModelFile::Hf { ckpt: h, .. } => {
            ("hf-safetensors", json!({"weight_files": h.weight_files}))
        }
        ModelFile::Gguf { file: g, .. } => (
            "gguf",
            json!({
                "version": g.version,
                "metadata": g.metadata.iter().map(|(k, v)| (k.clone(), json!(v.summary()))).collect::<serde_json::Map<_, _>>(),
            }),
        ),
        ModelFile::Pocket(p) => (
            "pocket",
            json!({
                "file_bytes": std::fs::metadata(&p.path).map(|x| x.len()).unwrap_or(0),
                "recipe": p.header.recipe,
                "provenance": p.header.provenance,
            }),
        ),
    };
    let report = json!({
        "path": m.path,
        "format": format,
        "file": extra,
        "spec": spec,
        "parameters": params,
        "weight_bytes": weight_bytes,
        "bits_per_parameter": weight_bytes as f64 * 8.0 / params.max(1) as f64,
        "dtypes": by_dtype.iter().map(|(k, (n, b))| (k.clone(), json!({"parameters": n, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
        "tokenizer": {
            "summary": m.tokenizer.summary(),
            "vocab_size": m.tokenizer.vocab_size(),
            "bos_token": m.tokenizer_meta.bos_token,
            "eos_token": m.tokenizer_meta.eos_token,
            "special_tokens": m.tokenizer.special_tokens().into_iter().map(|(id, t)| json!({"id": id, "token": t})).collect::<Vec<_>>(),
        },
        "stop_ids": m.stop_ids,
        "chat_template": m.template.as_ref().map(|t| json!({"source": t.origin, "chars": t.source.chars().count()})),
        "generation_config": m.generation,
        "verify": damaged.as_ref().map(|d| json!({"ok": d.is_empty(), "damaged": d})),
        "tensors": table,
    });
    let failed = damaged.as_ref().is_some_and(|d| !d.is_empty());
    if args.json {
        println!("{report}");
        return Ok(if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    println!("model        {}", m.path.display());
    match &m.file {
        ModelFile::Gguf { file: g, .. } => {
            println!(
                "format       GGUF v{}, {:.2} MB, {} metadata keys{}",
                g.version,
                std::fs::metadata(&m.path).map_or(0, |x| x.len()) as f64 / 1e6,
                g.metadata.len(),
                if args.metadata {
                    ""
                } else {
                    " (--metadata lists them)"
                }
            );
            if let Some(name) = g.get("general.name").and_then(|v| v.as_str()) {
                println!("name         {name}");
            }
            if args.metadata {
                for (k, v) in g
                    .metadata
                    .iter()
                    .filter(|(k, _)| !k.starts_with("tokenizer.ggml."))
                {
                    println!("  {k} = {}", v.summary());
                }
            }
        }
        ModelFile::Hf { ckpt: h, .. } => println!(
            "format       HF safetensors ({} file{})",
            h.weight_files.len(),
            if h.weight_files.len() == 1 { "" } else { "s" }
        ),
        ModelFile::Pocket(p) => println!(
            "format       .pocket, {:.2} MB\nrecipe       {}",
            report["file"]["file_bytes"].as_u64().unwrap_or(0) as f64 / 1e6,
            recipe_text(&p.header.recipe)
        ),
    }
    println!(
        "architecture {} (source dtype {})",
        spec.family.as_str(),
        spec.dtype.as_deref().unwrap_or("not stated")
    );
    println!(
        "shape        {} layers, hidden {}, FFN {}, heads {} / KV heads {}, head_dim {}, vocab {}",
        spec.num_layers,
        spec.hidden_size,
        spec.intermediate_size,
        spec.num_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.vocab_size
    );
    let biases: Vec<&str> = [
        (spec.qkv_bias, "q/k/v"),
        (spec.o_bias, "o"),
        (spec.mlp_bias, "mlp"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    println!(
        "attention    RoPE {}, RMSNorm eps {}, context {}, biases {}{}",
        rope_text(&spec.rope),
        short_float(spec.rms_norm_eps),
        thousands(spec.max_position_embeddings as u64),
        if biases.is_empty() {
            "none".to_string()
        } else {
            biases.join(", ")
        },
        if spec.qk_norm { ", q/k norm" } else { "" }
    );
    if let Some(sl) = &spec.sliding {
        println!(
            "sliding      window {} on {} of {} layers (RoPE {} there)",
            sl.window,
            sl.layers.iter().filter(|&&s| s).count(),
            spec.num_layers,
            rope_text(&sl.rope)
        );
    }
    if spec.family == pocket_formats::hf::Family::Gemma3 {
        println!(
            "gemma        MLP {:?}, (1 + w) norms around attention and MLP, embeddings × √hidden, softmax scale {:.5}, logit soft-cap {}",
            spec.activation,
            spec.attn_scale(),
            spec.final_logit_softcap
                .map_or("none".to_string(), short_float)
        );
    }
    println!(
        "embeddings   {}",
        if spec.tie_word_embeddings {
            "tied (head shares the embedding)"
        } else {
            "untied"
        }
    );
    println!(
        "parameters   {} ({:.2} bits each on average)",
        thousands(params),
        report["bits_per_parameter"].as_f64().unwrap_or(0.0)
    );
    // One column for the types, as wide as the longest name (`ggml_iq4_nl`).
    let w = by_dtype.keys().map(|k| k.len()).max().unwrap_or(0).max(8);
    for (k, (n, b)) in &by_dtype {
        println!(
            "  {k:<w$}   {} parameters, {:.1} MB",
            thousands(*n),
            *b as f64 / 1e6
        );
    }
    println!("tokenizer    {}", m.tokenizer.summary());
    println!(
        "  bos {:?}, eos {:?}, stop ids {:?}",
        m.tokenizer_meta.bos_token.as_deref().unwrap_or("-"),
        m.tokenizer_meta.eos_token.as_deref().unwrap_or("-"),
        m.stop_ids
    );
    match &m.template {
        Some(t) => println!(
            "chat template {} chars from {}",
            t.source.chars().count(),
            t.origin.display()
        ),
        None => println!("chat template none (use `run --raw`)"),
    }
    if let Some(d) = &damaged {
        if d.is_empty() {
            println!("verify       all {} tensor checksums match", table.len());
        } else {
            println!("verify       DAMAGED: {}", d.join(", "));
        }
    }
    if !args.tensors {
        println!("tensors      {} (--tensors lists them)", table.len());
    } else {
        println!(
            "\n{:<56} {:<9} {:<14} {:>12}  where",
            "tensor", "type", "shape", "bytes"
        );
        for t in &table {
            println!(
                "{:<56} {:<9} {:<14} {:>12}  {}",
                t.name,
                t.dtype,
                format!("{:?}", t.shape),
                t.bytes,
                t.location
            );
        }
    }
    if failed {
        eprintln!(
            "error: {}: {} damaged tensor(s): {}",
            m.path.display(),
            damaged.as_ref().map_or(0, |d| d.len()),
            damaged.unwrap_or_default().join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `theta 100000`, with the scaling rule when there is one (`, linear ×8`).
fn rope_text(rope: &pocket_formats::hf::RopeConfig) -> String {
    use pocket_formats::hf::RopeScaling;
    let theta = short_float(rope.theta);
    match &rope.scaling {
        RopeScaling::None => format!("theta {theta}"),
        RopeScaling::Linear { factor } => {
            format!("theta {theta}, linear ×{}", short_float(*factor))
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => format!(
            "theta {theta}, llama3 ×{} (low {}, high {}, from {original_max_position_embeddings})",
            short_float(*factor),
            short_float(*low_freq_factor),
            short_float(*high_freq_factor)
        ),
        RopeScaling::Factors { factors } => {
            format!("theta {theta}, {} per-frequency factors", factors.len())
        }
    }
}

/// A config float as people write it: `1e-6` and `0.00001`, not `0.000009999999747378752`
/// (values read from f32 fields carry f32 rounding; the shortest f32 spelling undoes it).
fn short_float(x: f64) -> String {
    let f = x as f32;
    if f as f64 == x || (f as f64 - x).abs() <= x.abs() * 1e-7 {
        let s = format!("{f}");
        if s.len() > 8 && f != 0.0 && f.abs() < 1e-3 {
            format!("{f:e}")
        } else {
            s
        }
    } else {
        format!("{x}")
    }
}

/// The export recipe in words: `Q4 block 32 (asymmetric) for linear layers and the embedding,
/// scale search, QAT auto`.
fn recipe_text(recipe: &serde_json::Value) -> String {
    let field = |k: &str| recipe.get(k).and_then(|v| v.as_str()).unwrap_or("?");
    let overrides = recipe
        .get("overrides")
        .and_then(|v| v.as_array())
        .map_or(0, |a| a.len());
    if recipe.get("keep_source_blocks").and_then(|v| v.as_bool()) == Some(true) {
        return "the GGUF's quantized blocks kept bit for bit (ggml_* types below); \
                its dense tensors as they were"
            .into();
    }
    // `search + GPTQ` when the weights took error compensation (`--gptq`).
    let method = match recipe.get("gptq").and_then(|v| v.as_bool()) {
        Some(true) => format!("{} + GPTQ", field("method")),
        _ => field("method").to_string(),
    };
    let mut s = format!(
        "linear {}, embedding {}, method {method}, QAT {}",
        field("linear"),
        field("embed"),
        field("qat")
    );
    if let Some(b) = recipe.get("budget") {
        // The overrides are the choice: count the types chosen.
        let mut counts: Vec<(String, usize)> = Vec::new();
        for o in recipe["overrides"].as_array().into_iter().flatten() {
            let t = o.get(1).and_then(|v| v.as_str()).unwrap_or("?").to_string();
            match counts.iter_mut().find(|(n, _)| *n == t) {
                Some((_, c)) => *c += 1,
                None => counts.push((t, 1)),
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        let list: Vec<String> = counts.iter().map(|(t, c)| format!("{c} {t}")).collect();
        return format!(
            "size budget {:.2} MB: each weight matrix's type chosen by its measured effect on the \
             output ({} calibration tokens, predicted KL {:.4}): {}; method {method}",
            b["target_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            b["tokens"].as_u64().unwrap_or(0),
            b["predicted_kl"].as_f64().unwrap_or(f64::NAN),
            list.join(", "),
        );
    }
    if overrides > 0 {
        s.push_str(&format!(", {overrides} override(s)"));
    }
    if recipe.get("linear").is_none() {
        return recipe.to_string();
    }
    s
}
