//! The engine settings of this process: `--activations` and the `POCKET_ISA`, `POCKET_ACT`,
//! `POCKET_KV` and `POCKET_POOL` environment variables, read here and nowhere in the library,
//! which takes them as an [`EngineConfig`] value per model.

use anyhow::{bail, Result};
use pocket::config::{Activations, EngineConfig, Isa, KvPrecision};
use pocket::loader::LoadOptions;
use std::sync::OnceLock;

static ACTIVATIONS_FLAG: OnceLock<Activations> = OnceLock::new();
static KV_FLAG: OnceLock<KvPrecision> = OnceLock::new();
static LORA_FLAGS: OnceLock<Vec<String>> = OnceLock::new();

/// Whether `--lora` was given.
pub fn has_lora() -> bool {
    LORA_FLAGS.get().is_some_and(|v| !v.is_empty())
}

/// Records `--lora` (repeatable, global).
pub fn set_lora_flags(specs: Vec<String>) {
    let _ = LORA_FLAGS.set(specs);
}

/// One `--lora [NAME=]PATH[:SCALE]`: its name (the file's stem unless given), path and scale.
pub fn parse_lora(spec: &str) -> Result<(String, std::path::PathBuf, f32)> {
    let (name, rest) = match spec.split_once('=') {
        Some((n, r)) if !n.is_empty() && !n.contains('/') => (Some(n.to_string()), r),
        _ => (None, spec),
    };
    // PATH:SCALE, unless what follows the last colon is not a number (a path with a colon).
    let (path, scale) = match rest.rsplit_once(':') {
        Some((p, s)) if !p.is_empty() => match s.parse::<f32>() {
            Ok(x) if x.is_finite() => (p, x),
            Ok(_) => bail!("--lora {spec}: the scale {s} is not a finite number"),
            Err(_) => (rest, 1.0),
        },
        _ => (rest, 1.0),
    };
    if path.is_empty() {
        bail!("--lora {spec}: no adapter path");
    }
    let path = std::path::PathBuf::from(path);
    let name = name.unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "adapter".into())
    });
    Ok((name, path, scale))
}

/// Opens a model with this process's settings and its `--lora` adapters attached (each at its
/// scale, run unmerged); returns the adapters too (a server lists them).
pub fn open_model(
    path: &std::path::Path,
    options: LoadOptions,
) -> Result<(
    pocket::loader::LoadedModel,
    Vec<(std::sync::Arc<pocket::lora::Adapter>, f32)>,
)> {
    use anyhow::Context;
    let mut m = pocket::loader::LoadedModel::open_with(path, options)?;
    let mut adapters = Vec::new();
    for spec in LORA_FLAGS.get().map(Vec::as_slice).unwrap_or(&[]) {
        let (name, p, scale) = parse_lora(spec)?;
        if adapters
            .iter()
            .any(|(a, _): &(std::sync::Arc<pocket::lora::Adapter>, f32)| a.name == name)
        {
            bail!("--lora {spec}: the name {name:?} is given twice");
        }
        let a = m.model.open_adapter(&p, &name).context("--lora")?;
        adapters.push((std::sync::Arc::new(a), scale));
    }
    if !adapters.is_empty() {
        m.model.lora = Some(std::sync::Arc::new(pocket::lora::AdapterSet {
            adapters: adapters.clone(),
        }));
    }
    Ok((m, adapters))
}

/// Records `--activations` (it wins over `POCKET_ACT`).
pub fn set_activations_flag(a: Activations) {
    let _ = ACTIVATIONS_FLAG.set(a);
}

/// Records `--kv` (it wins over `POCKET_KV`).
pub fn set_kv_flag(k: KvPrecision) {
    let _ = KV_FLAG.set(k);
}

/// The configuration models load with:
/// - `POCKET_ISA=scalar|avx2|avx512|amx` (x86-64) or `scalar|neon|dotprod|i8mm` (aarch64) caps the
///   kernels (never above what the CPU has);
/// - `--activations` or `POCKET_ACT=int8|f32` picks the activation precision;
/// - `--kv` or `POCKET_KV=f16|f32|q8|q4` the cache, which defaults to f32 on the exact (f32)
///   path and to f16 otherwise (docs/performance.md, "Long context", says why).
pub fn engine_config() -> Result<EngineConfig> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut c = EngineConfig::fast();
    if let Some(v) = var("POCKET_ISA") {
        let native = Isa::native();
        let names = || {
            native
                .iter()
                .map(|i| i.name().trim_start_matches("aarch64-"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match Isa::parse(&v) {
            Some(isa) if native.contains(&isa) => c = c.capped(isa),
            Some(isa) => bail!(
                "POCKET_ISA={v}: {} is not an instruction set of this build's CPU \
                 architecture; expected one of {}",
                isa.name(),
                names()
            ),
            None => bail!("POCKET_ISA={v}: expected one of {}", names()),
        }
    }
    let acts = match (ACTIVATIONS_FLAG.get(), var("POCKET_ACT").as_deref()) {
        (Some(&a), _) => a,
        (None, None | Some("int8x2")) => Activations::Int8x2,
        (None, Some("int8")) => Activations::Int8,
        (None, Some("f32")) => Activations::F32,
        (None, Some(v)) => bail!("POCKET_ACT={v}: expected int8x2, int8 or f32"),
    };
    c.activations = acts;
    c.kv = match (KV_FLAG.get(), var("POCKET_KV").as_deref()) {
        (Some(&k), _) => k,
        (None, Some(v)) => match KvPrecision::parse(v) {
            Some(k) => k,
            None => bail!("POCKET_KV={v}: expected f16, f32, q8 or q4"),
        },
        (None, None) if acts == Activations::F32 => KvPrecision::F32,
        (None, None) => KvPrecision::F16,
    };
    Ok(c)
}

/// Load options with this process's engine configuration.
pub fn load_options(verify: bool) -> Result<LoadOptions> {
    Ok(LoadOptions {
        verify,
        config: engine_config()?,
    })
}

/// `POCKET_POOL=rayon`: mat-vec row bands on rayon instead of pocket's own pool.
pub fn bands_on_rayon() -> bool {
    std::env::var("POCKET_POOL").is_ok_and(|v| v == "rayon")
}
