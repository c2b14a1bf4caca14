//! LoRA adapters as people have them, read into one form: per base weight (by its Hugging Face
//! name), the low-rank pair `A` `[r, in]` and `B` `[out, r]` in f32 and the scale `s`, so that
//! the adapted layer computes `W·x + s·B·(A·x)`.
//!
//! - **PEFT directories** (`adapter_config.json` + `adapter_model.safetensors`, as
//!   `save_pretrained` writes them): `s = alpha / r`, or `alpha / √r` with `use_rslora`, each
//!   module's rank read from its tensors and its alpha from `alpha_pattern` (PEFT's
//!   `get_pattern_key`: a key is a regex that must match a dot-bounded suffix of the module's
//!   name). Embedding LoRAs (`lora_embedding_A` `[r, vocab]`, `lora_embedding_B` `[hidden, r]`)
//!   add `s·B·A[:, token]` to a token's embedding. `modules_to_save` weights (saved under the
//!   module's own name) replace the base's.
//! - **llama.cpp's GGUF LoRA files** (`general.type = adapter`, `adapter.type = lora`,
//!   `blk.N.<name>.weight.lora_a` / `.lora_b`, as `convert_lora_to_gguf.py` writes them):
//!   `s = adapter.lora.alpha / r`, or 1 when alpha is 0 or absent (llama.cpp's rule); the rows of
//!   a llama q/k projection's `B` are in llama.cpp's permuted order (the engine maps them back
//!   with the base's head size); `token_embd`'s `A` is stored `[vocab, r]`.
//!
//! DoRA, biases, other PEFT methods (LoHa, IA3, …) and adapters that resize the vocabulary are
//! refused by name. Shapes are checked against each other here and against the base model when
//! the engine attaches the adapter; sizes read from a file are never trusted for allocation
//! before that check.

use crate::gguf::reader::{GgufFile, GgufValue};
use crate::hf::{Family, SafetensorsFile};
use crate::FormatError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest rank read (PEFT's largest published adapters are 256; a bigger one is a broken
/// or hostile file).
pub const MAX_RANK: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Peft,
    Gguf,
}

/// One adapted weight.
#[derive(Clone, Debug)]
pub struct LoraModule {
    /// The base weight's HF name (`model.layers.3.self_attn.q_proj.weight`).
    pub target: String,
    pub rank: usize,
    /// `[rank, in]`; for an embedding, `[vocab, rank]` (a token's row).
    pub a: Vec<f32>,
    /// `[out, rank]`.
    pub b: Vec<f32>,
    /// `in` (an embedding: the vocabulary).
    pub cols: usize,
    /// `out` (an embedding: the hidden size).
    pub rows: usize,
    pub scale: f32,
    pub embedding: bool,
    /// `B`'s rows are in llama.cpp's interleaved q/k order (a GGUF adapter of a `llama` model).
    pub qk_permuted: bool,
}

/// A weight the adapter replaces whole (PEFT's `modules_to_save`).
#[derive(Clone, Debug)]
pub struct Replaced {
    pub target: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

#[derive(Clone, Debug)]
pub struct LoraAdapter {
    pub path: PathBuf,
    pub source: Source,
    pub modules: Vec<LoraModule>,
    pub replaced: Vec<Replaced>,
    /// The base model the adapter was made for, as the file names it (PEFT's
    /// `base_model_name_or_path`, GGUF `general.architecture`).
    pub base: Option<String>,
    /// A GGUF adapter's `general.architecture`.
    pub architecture: Option<String>,
    /// PEFT's `r` and `lora_alpha`, or the GGUF alpha (0 when absent): what `inspect` shows.
    pub alpha: f64,
    pub rslora: bool,
}

fn invalid(path: &Path, reason: impl Into<String>) -> FormatError {
    FormatError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads a PEFT adapter directory or a GGUF LoRA file.
pub fn open(path: &Path) -> Result<LoraAdapter, FormatError> {
    if path.is_dir() {
        return open_peft(path);
    }
    if GgufFile::sniff(path) {
        return open_gguf(path);
    }
    if !path.exists() {
        return Err(FormatError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    Err(invalid(
        path,
        "not a LoRA adapter: expected a PEFT directory (adapter_config.json and \
         adapter_model.safetensors) or a GGUF LoRA file",
    ))
}

fn to_f32(t: &crate::hf::MappedTensor, path: &Path) -> Result<Vec<f32>, FormatError> {
    let v = t.to_f32_vec().ok_or_else(|| FormatError::BadTensor {
        path: path.to_path_buf(),
        name: t.name.clone(),
        reason: format!("dtype {} is not F32, F16 or BF16", t.dtype.name()),
    })?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(FormatError::BadTensor {
            path: path.to_path_buf(),
            name: t.name.clone(),
            reason: format!("holds NaN or infinity (element {i})"),
        });
    }
    Ok(v)
}

/// PEFT's `get_pattern_key`: the first pattern (in the config's order) that matches a
/// dot-bounded suffix of `module`.
fn pattern_value(
    patterns: &serde_json::Map<String, Value>,
    module: &str,
    path: &Path,
) -> Result<Option<f64>, FormatError> {
    for (k, v) in patterns {
        let re = regex::Regex::new(&format!(r"^(.*\.)?({k})$")).map_err(|e| {
            invalid(
                path,
                format!("adapter_config.json: pattern {k:?} is not a regex: {e}"),
            )
        })?;
        if re.is_match(module) {
            let x = v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                invalid(
                    path,
                    format!("adapter_config.json: pattern {k:?} has no numeric value"),
                )
            })?;
            return Ok(Some(x));
        }
    }
    Ok(None)
}

fn open_peft(dir: &Path) -> Result<LoraAdapter, FormatError> {
    let cfg_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| FormatError::io(&cfg_path, e))?;
    let cfg: Value = serde_json::from_str(&text).map_err(|error| FormatError::Json {
        path: cfg_path.clone(),
        error,
    })?;
    let field = |k: &str| cfg.get(k).filter(|v| !v.is_null());
    let peft_type = field("peft_type").and_then(Value::as_str).unwrap_or("LORA");
    if peft_type != "LORA" {
        return Err(invalid(
            &cfg_path,
            format!("a {peft_type} adapter: pocket runs LoRA adapters (peft_type LORA)"),
        ));
    }
    if field("use_dora").and_then(Value::as_bool) == Some(true) {
        return Err(invalid(
            &cfg_path,
            "a DoRA adapter (use_dora): pocket runs plain LoRA",
        ));
    }
    if let Some(b) = field("bias")
        .and_then(Value::as_str)
        .filter(|b| *b != "none")
    {
        return Err(invalid(
            &cfg_path,
            format!("bias = {b:?}: adapters that train biases are not supported"),
        ));
    }
    if field("lora_bias").and_then(Value::as_bool) == Some(true) {
        return Err(invalid(
            &cfg_path,
            "lora_bias: adapters with a bias on B are not supported",
        ));
    }
    if field("fan_in_fan_out").and_then(Value::as_bool) == Some(true) {
        return Err(invalid(
            &cfg_path,
            "fan_in_fan_out: the adapter is for transposed (Conv1D) weights, which pocket's models do not have",
        ));
    }
    let num = |k: &str, default: f64| -> Result<f64, FormatError> {
        match field(k) {
            None => Ok(default),
            Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                invalid(
                    &cfg_path,
                    format!("adapter_config.json: `{k}` is not a number"),
                )
            }),
        }
    };
    let r = num("r", 8.0)?;
    let alpha = num("lora_alpha", 8.0)?;
    if !(r >= 1.0 && r <= MAX_RANK as f64) {
        return Err(invalid(
            &cfg_path,
            format!("adapter_config.json: r = {r} is outside 1..={MAX_RANK}"),
        ));
    }
    let rslora = field("use_rslora").and_then(Value::as_bool) == Some(true);
    let empty = serde_json::Map::new();
    let alpha_pattern = field("alpha_pattern")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let st_path = dir.join("adapter_model.safetensors");
    if !st_path.is_file() {
        let bin = dir.join("adapter_model.bin");
        return Err(if bin.is_file() {
            invalid(
                &bin,
                "a pickled adapter: save it as safetensors (save_pretrained's default) first",
            )
        } else {
            FormatError::io(
                &st_path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            )
        });
    }
    let st = SafetensorsFile::open(&st_path)?;
    // Pair A and B by module; keep whole weights (modules_to_save) apart.
    let mut pairs: BTreeMap<
        String,
        (
            Option<&crate::hf::MappedTensor>,
            Option<&crate::hf::MappedTensor>,
            bool,
        ),
    > = BTreeMap::new();
    let mut replaced = Vec::new();
    for (name, t) in &st.tensors {
        let Some(rest) = name.strip_prefix("base_model.model.") else {
            return Err(FormatError::BadTensor {
                path: st_path.clone(),
                name: name.clone(),
                reason: "not a PEFT adapter tensor (no base_model.model. prefix)".into(),
            });
        };
        let (module, part, emb) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
            (m, 0, false)
        } else if let Some(m) = rest.strip_suffix(".lora_B.weight") {
            (m, 1, false)
        } else if let Some(m) = rest.strip_suffix(".lora_embedding_A") {
            (m, 0, true)
        } else if let Some(m) = rest.strip_suffix(".lora_embedding_B") {
            (m, 1, true)
        } else if rest.ends_with(".lora_magnitude_vector")
            || rest.contains(".lora_magnitude_vector.")
        {
            return Err(invalid(
                &st_path,
                "a DoRA adapter (lora_magnitude_vector): pocket runs plain LoRA",
            ));
        } else if rest.ends_with(".base_layer.weight") {
            // The base's own embedding or head, saved beside an adapter of it: not a change.
            continue;
        } else {
            replaced.push(Replaced {
                target: rest.to_string(),
                shape: t.shape.clone(),
                values: to_f32(t, &st_path)?,
            });
            continue;
        };
        let e = pairs.entry(module.to_string()).or_insert((None, None, emb));
        if part == 0 {
            e.0 = Some(t);
        } else {
            e.1 = Some(t);
        }
    }
    let mut modules = Vec::new();
    for (module, (a, b, emb)) in pairs {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(invalid(
                &st_path,
                format!("module {module}: has lora_A or lora_B but not both"),
            ));
        };
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return Err(invalid(
                &st_path,
                format!(
                    "module {module}: lora_A {:?} and lora_B {:?} are not matrices",
                    a.shape, b.shape
                ),
            ));
        }
        let rank = a.shape[0];
        if rank == 0 || rank > MAX_RANK || b.shape[1] != rank {
            return Err(invalid(
                &st_path,
                format!(
                    "module {module}: lora_A {:?} and lora_B {:?} do not share a rank of 1..={MAX_RANK}",
                    a.shape, b.shape
                ),
            ));
        }
        let alpha_m = pattern_value(alpha_pattern, &module, &cfg_path)?.unwrap_or(alpha);
        let scale = if rslora {
            alpha_m / (rank as f64).sqrt()
        } else {
            alpha_m / rank as f64
        };
        let (cols, rows) = (a.shape[1], b.shape[0]);
        let mut av = to_f32(a, &st_path)?;
        if emb {
            // [r, vocab] → [vocab, r]: a token's row is what the lookup reads.
            let mut t = vec![0f32; av.len()];
            for i in 0..rank {
                for j in 0..cols {
                    t[j * rank + i] = av[i * cols + j];
                }
            }
            av = t;
        }
        modules.push(LoraModule {
            target: format!("{module}.weight"),
            rank,
            a: av,
            b: to_f32(b, &st_path)?,
            cols,
            rows,
            scale: scale as f32,
            embedding: emb,
            qk_permuted: false,
        });
    }
    if modules.is_empty() && replaced.is_empty() {
        return Err(invalid(&st_path, "the adapter holds no LoRA tensors"));
    }
    // PEFT records the base's class (`Qwen2ForCausalLM`): its family, when pocket knows it.
    let architecture = cfg
        .pointer("/auto_mapping/base_model_class")
        .and_then(Value::as_str)
        .and_then(|c| {
            [
                ("LlamaFor", "llama"),
                ("Qwen2For", "qwen2"),
                ("Qwen3For", "qwen3"),
                ("Gemma3", "gemma3_text"),
            ]
            .iter()
            .find(|(p, _)| c.starts_with(p))
            .map(|(_, f)| f.to_string())
        });
    Ok(LoraAdapter {
        path: dir.to_path_buf(),
        source: Source::Peft,
        modules,
        replaced,
        base: field("base_model_name_or_path")
            .and_then(Value::as_str)
            .map(str::to_string),
        architecture,
        alpha,
        rslora,
    })
}

fn open_gguf(path: &Path) -> Result<LoraAdapter, FormatError> {
    let f = GgufFile::open(path)?;
    let s = |k: &str| f.get(k).and_then(GgufValue::as_str);
    if s("general.type") != Some("adapter") || s("adapter.type") != Some("lora") {
        return Err(invalid(
            path,
            format!(
                "not a LoRA adapter (general.type = {:?}, adapter.type = {:?}; a model GGUF is \
                 the base, not an adapter)",
                s("general.type").unwrap_or("none"),
                s("adapter.type").unwrap_or("none")
            ),
        ));
    }
    let arch = f.architecture().map(str::to_string);
    let family = arch
        .as_deref()
        .and_then(Family::from_model_type)
        .ok_or_else(|| {
            invalid(
                path,
                format!(
                    "general.architecture {:?} is not one pocket runs",
                    arch.as_deref().unwrap_or("none")
                ),
            )
        })?;
    let alpha = f
        .get("adapter.lora.alpha")
        .and_then(GgufValue::as_f64)
        .unwrap_or(0.0);
    if !alpha.is_finite() {
        return Err(invalid(path, "adapter.lora.alpha is not a finite number"));
    }
    let mut pairs: BTreeMap<
        String,
        (
            Option<&crate::gguf::reader::GgufTensor>,
            Option<&crate::gguf::reader::GgufTensor>,
        ),
    > = BTreeMap::new();
    for t in &f.tensors {
        let (base, part) = if let Some(b) = t.name.strip_suffix(".lora_a") {
            (b, 0)
        } else if let Some(b) = t.name.strip_suffix(".lora_b") {
            (b, 1)
        } else if t.name.ends_with("_norm.weight") {
            continue; // llama.cpp skips the norms mergekit adds
        } else {
            return Err(FormatError::BadTensor {
                path: path.to_path_buf(),
                name: t.name.clone(),
                reason: "not a lora_a or lora_b tensor".into(),
            });
        };
        let e = pairs.entry(base.to_string()).or_insert((None, None));
        if part == 0 {
            e.0 = Some(t);
        } else {
            e.1 = Some(t);
        }
    }
    let mut modules = Vec::new();
    for (base, (a, b)) in pairs {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(invalid(
                path,
                format!("{base}: has lora_a or lora_b but not both"),
            ));
        };
        let target = crate::gguf::model::hf_name(&base, family).ok_or_else(|| {
            invalid(
                path,
                format!("{base}: not a tensor of a {} model", family.as_str()),
            )
        })?;
        let read =
            |t: &crate::gguf::reader::GgufTensor| -> Result<(Vec<f32>, usize, usize), FormatError> {
                if t.dims.len() != 2 {
                    return Err(FormatError::BadTensor {
                        path: path.to_path_buf(),
                        name: t.name.clone(),
                        reason: format!("has {} dimensions, not 2", t.dims.len()),
                    });
                }
                let (rows, cols) = t.matrix_shape();
                let mut out = vec![0f32; rows * cols];
                let row_bytes =
                    t.ty.bytes_for(cols as u64)
                        .ok_or_else(|| FormatError::BadTensor {
                            path: path.to_path_buf(),
                            name: t.name.clone(),
                            reason: format!(
                                "a row of {cols} does not fill whole {} blocks",
                                t.ty.name()
                            ),
                        })? as usize;
                let bytes = t.data.as_slice();
                for (r, o) in out.chunks_exact_mut(cols).enumerate() {
                    crate::gguf::ggml::dequantize(
                        t.ty,
                        &bytes[r * row_bytes..(r + 1) * row_bytes],
                        o,
                    );
                }
                if out.iter().any(|x| !x.is_finite()) {
                    return Err(FormatError::BadTensor {
                        path: path.to_path_buf(),
                        name: t.name.clone(),
                        reason: "holds NaN or infinity".into(),
                    });
                }
                Ok((out, rows, cols))
            };
        let emb = target == "model.embed_tokens.weight";
        let (a_v, a_rows, a_cols) = read(a)?;
        let (b_v, b_rows, b_cols) = read(b)?;
        // Linear: A [r, in], B [out, r]. Embedding: A stored [vocab, r], B [hidden, r].
        let rank = b_cols;
        let ok = if emb { a_cols == rank } else { a_rows == rank };
        if !ok || rank == 0 || rank > MAX_RANK {
            return Err(invalid(
                path,
                format!(
                    "{base}: lora_a [{a_rows}, {a_cols}] and lora_b [{b_rows}, {b_cols}] do not \
                     share a rank of 1..={MAX_RANK}"
                ),
            ));
        }
        let scale = if alpha != 0.0 {
            alpha / rank as f64
        } else {
            1.0
        };
        let qk = target.contains("self_attn.q_proj") || target.contains("self_attn.k_proj");
        modules.push(LoraModule {
            target,
            rank,
            a: a_v,
            b: b_v,
            cols: if emb { a_rows } else { a_cols },
            rows: b_rows,
            scale: scale as f32,
            embedding: emb,
            qk_permuted: qk && arch.as_deref() == Some("llama"),
        });
    }
    if modules.is_empty() {
        return Err(invalid(path, "the adapter holds no LoRA tensors"));
    }
    Ok(LoraAdapter {
        path: path.to_path_buf(),
        source: Source::Gguf,
        modules,
        replaced: Vec::new(),
        base: arch.clone(),
        architecture: arch,
        alpha,
        rslora: false,
    })
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Peft => "PEFT",
            Source::Gguf => "GGUF",
        }
    }
}
