//! `pocket inspect`: what a model file holds, for people (text) and scripts (`--json`).

use crate::term::thousands;
use anyhow::Result;
use clap::Args;
use pocket::loader::LoadedModel;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct InspectArgs {
    /// Model: an HF checkpoint directory
    pub model: PathBuf,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// Leave out the per-tensor table
    #[arg(long)]
    pub no_tensors: bool,
}

pub fn main(args: InspectArgs) -> Result<ExitCode> {
    let m = LoadedModel::open(&args.model)?;
    let ck = &m.checkpoint;
    let spec = &ck.spec;
    let mut by_dtype: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in ck.tensors() {
        let e = by_dtype.entry(t.dtype.name().to_string()).or_default();
        e.0 += t.numel() as u64;
        e.1 += t.bytes().len() as u64;
    }
    let template = m
        .template
        .as_ref()
        .map(|t| json!({"source": t.origin, "chars": t.source.chars().count()}));
    let specials: Vec<_> = m
        .tokenizer
        .special_tokens()
        .into_iter()
        .map(|(id, t)| json!({"id": id, "token": t}))
        .collect();
    let tensors: Vec<_> = ck
        .tensors()
        .map(|t| {
            json!({
                "name": t.name, "dtype": t.dtype.name(), "shape": t.shape,
                "file": ck.file_of(&t.name).and_then(|p| p.file_name()).map(|f| f.to_string_lossy().to_string()),
            })
        })
        .collect();
    let report = json!({
        "path": m.path,
        "format": "hf-safetensors",
        "weight_files": ck.weight_files,
        "spec": spec,
        "parameters": ck.parameter_count(),
        "dtypes": by_dtype.iter().map(|(k, (n, b))| (k.clone(), json!({"parameters": n, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
        "tokenizer": {
            "summary": m.tokenizer.summary(),
            "vocab_size": m.tokenizer.vocab_size(),
            "bos_token": m.tokenizer_config.bos_token,
            "eos_token": m.tokenizer_config.eos_token,
            "special_tokens": specials,
        },
        "stop_ids": m.stop_ids,
        "chat_template": template,
        "generation_config": m.generation,
        "tensors": tensors,
    });
    if args.json {
        println!("{report}");
        return Ok(ExitCode::SUCCESS);
    }
    let r = &report;
    println!("model        {}", m.path.display());
    println!(
        "format       HF safetensors ({} file{})",
        ck.weight_files.len(),
        if ck.weight_files.len() == 1 { "" } else { "s" }
    );
    println!(
        "architecture {} ({})",
        spec.family.as_str(),
        r["spec"]["dtype"].as_str().unwrap_or("dtype not stated")
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
    println!(
        "attention    RoPE theta {} ({:?}), rms_norm_eps {}, context {}, biases q/k/v {} o {} mlp {}, q/k norm {}",
        spec.rope.theta, spec.rope.scaling, spec.rms_norm_eps, spec.max_position_embeddings, spec.qkv_bias, spec.o_bias, spec.mlp_bias, spec.qk_norm
    );
    println!(
        "embeddings   {}",
        if spec.tie_word_embeddings {
            "tied (head shares the embedding)"
        } else {
            "untied"
        }
    );
    println!("parameters   {}", thousands(ck.parameter_count()));
    for (k, (n, b)) in &by_dtype {
        println!(
            "  {k:<6}     {} parameters, {:.1} MB",
            thousands(*n),
            *b as f64 / 1e6
        );
    }
    println!("tokenizer    {}", m.tokenizer.summary());
    println!(
        "  bos {:?}, eos {:?}, stop ids {:?}",
        m.tokenizer_config.bos_token.as_deref().unwrap_or("-"),
        m.tokenizer_config.eos_token.as_deref().unwrap_or("-"),
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
    if !args.no_tensors {
        println!("\n{:<56} {:<6} {:<16} file", "tensor", "dtype", "shape");
        for t in ck.tensors() {
            let file = ck
                .file_of(&t.name)
                .and_then(|p| p.file_name())
                .map(|f| f.to_string_lossy().to_string());
            println!(
                "{:<56} {:<6} {:<16} {}",
                t.name,
                t.dtype.name(),
                format!("{:?}", t.shape),
                file.unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
