//! `.pocket` Q4 → MNN's LLM package (`llm.mnn`, `llm.mnn.weight`, `llm_config.json`,
//! `config.json`, `tokenizer.txt`), in pure Rust: the FlatBuffer graph is written directly
//! (no Python, no converter whose version must match the engine). The int4 codes and f16
//! `(zero, scale)` pairs are the `.pocket` bytes, copied; see docs/mnn-format.md.

pub mod blob;
pub mod fb;
pub mod graph;
pub mod mtok;
pub mod tokenizer;

use crate::atomic::{write_atomic, AtomicFile};
use crate::hf::Family;
use crate::model_file::{ModelFile, SourceTensor};
use crate::quant::{q4, QuantType};
use crate::FormatError;
use graph::*;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;

/// The files of a package, in the order they are written; the tokenizer is `tokenizer.mtok`
/// (MNN's pipeline format, faithful to tokenizer.json) where [`mtok`] can encode the
/// tokenizer, else [`TOKENIZER_TXT`].
pub const FILES: [&str; 5] = [
    "llm.mnn.weight",
    "llm.mnn",
    "tokenizer.mtok",
    "llm_config.json",
    "config.json",
];

/// The fallback tokenizer file: MNN's text format, type 3 (GPT-2-style pre-tokenization).
pub const TOKENIZER_TXT: &str = "tokenizer.txt";

/// The embedding table of an untied model (int4 codes, then the f16 pairs or scales), which
/// MNN's engine reads rows from; a tied model's rows come from the head's blob instead.
pub const EMBEDDINGS: &str = "embeddings_int4.bin";

#[derive(Debug, Serialize)]
pub struct MnnReport {
    pub output: String,
    /// Bytes per file, in [`FILES`] order (then [`EMBEDDINGS`] for an untied model).
    pub files: Vec<(String, u64)>,
    pub total_bytes: u64,
    pub ops: usize,
    /// Linear layers whose int4 codes and pairs were copied from the source.
    pub linear_layers: usize,
    /// Where each source tensor went: its Convolution's `external` array.
    pub tensors: Vec<MnnTensor>,
}

#[derive(Debug, Serialize)]
pub struct MnnTensor {
    pub name: String,
    /// `[offset, header + codes, alphas, bias, 0]` for a linear layer, `[offset, gamma, beta]`
    /// for a norm.
    pub external: Vec<i64>,
    /// The int4 block length (linear layers).
    pub block: Option<usize>,
}

fn invalid(path: &Path, reason: impl Into<String>) -> FormatError {
    FormatError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The graph and `llm.mnn.weight` under construction, and where each tensor went.
struct Builder<'a> {
    source: &'a ModelFile,
    tensors: Vec<SourceTensor>,
    g: Graph,
    file: AtomicFile,
    offset: u64,
    eps: f32,
    placed: Vec<MnnTensor>,
    linears: usize,
}

impl Builder<'_> {
    /// Appends `tensor`'s consecutive sections; returns MNN's `external` array `[offset, len…]`.
    fn put(
        &mut self,
        tensor: &str,
        block: Option<usize>,
        sections: &[&[u8]],
    ) -> Result<Vec<i64>, FormatError> {
        let mut ext = vec![self.offset as i64];
        for s in sections {
            self.file.write_all(s)?;
            self.offset += s.len() as u64;
            ext.push(s.len() as i64);
        }
        self.placed.push(MnnTensor {
            name: tensor.into(),
            external: ext.clone(),
            block,
        });
        Ok(ext)
    }

    /// RMSNorm `tensor` over `resid` (plus the pending `delta`, added by the same op, which
    /// then also outputs the new residual stream). Returns the normalized tensor's name.
    fn norm(
        &mut self,
        tensor: &str,
        out: &str,
        resid: &mut String,
        delta: &mut Option<String>,
    ) -> Result<String, FormatError> {
        let gamma = self.source.read_f32(tensor)?;
        let ext = self.put(
            tensor,
            None,
            &[&blob::f32_bytes(&gamma), &vec![0u8; gamma.len() * 4]],
        )?;
        let p = Some(rms_norm_external(self.eps, ext));
        match delta.take() {
            None => self
                .g
                .op(op::LAYER_NORM, out, &[resid.as_str()], &[out], p, NC4HW4),
            Some(d) => {
                let sum = format!("{out}/residual");
                self.g.op(
                    op::LAYER_NORM,
                    out,
                    &[resid.as_str(), &d],
                    &[&sum, out],
                    p,
                    NC4HW4,
                );
                *resid = sum;
            }
        }
        Ok(out.to_string())
    }

    /// The linear layer `{prefix}.weight` (and `.bias`) as a Convolution reading `input`.
    fn conv(
        &mut self,
        prefix: &str,
        out: &str,
        input: &str,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<String, FormatError> {
        let tensor = format!("{prefix}.weight");
        let lin = linear(self.source, &self.tensors, &tensor, rows, cols)?;
        let bias = match bias {
            true => blob::f32_bytes(&self.source.read_f32(&format!("{prefix}.bias"))?),
            false => Vec::new(),
        };
        let mut weight = blob::conv_header(rows, cols);
        weight.extend_from_slice(&lin.codes);
        let ext = self.put(
            &tensor,
            Some(lin.block),
            &[&weight, &lin.alphas, &bias, &[]],
        )?;
        self.g.op(
            op::CONVOLUTION,
            out,
            &[input],
            &[out],
            Some(conv_int4(&lin, ext)),
            NHWC,
        );
        self.linears += 1;
        Ok(out.to_string())
    }
}

/// A Q4 linear layer of the source, in MNN's blob form.
pub struct Linear {
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
    pub sym: bool,
    pub codes: Vec<u8>,
    /// f16 `(zero, scale)` pairs, or one f16 scale per block when symmetric.
    pub alphas: Vec<u8>,
}

/// `tensors` is `source.tensors()`, listed once by the caller.
fn linear(
    source: &ModelFile,
    tensors: &[SourceTensor],
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Linear, FormatError> {
    let path = source.path();
    let t = tensors
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| invalid(path, format!("tensor `{name}` is missing")))?;
    let Some(QuantType::Q4 { block, sym }) = t.stored else {
        return Err(invalid(
            path,
            format!(
                "tensor `{name}` is {}, not Q4: MNN export copies Q4 weights (export with --quant q4)",
                t.stored.map_or("of an unknown type".into(), |q| q.to_string())
            ),
        ));
    };
    if t.shape != [rows, cols] {
        return Err(invalid(
            path,
            format!(
                "tensor `{name}` has shape {:?}, expected [{rows}, {cols}]",
                t.shape
            ),
        ));
    }
    let bytes = source
        .raw_bytes(name)
        .ok_or_else(|| invalid(path, format!("tensor `{name}` cannot be read")))?;
    if (QuantType::Q4 { block, sym }).byte_size(rows, cols) != Some(bytes.len()) {
        return Err(invalid(
            path,
            format!("tensor `{name}` has the wrong byte size"),
        ));
    }
    let (codes, params) = q4::planes(&bytes, rows, cols);
    Ok(Linear {
        rows,
        cols,
        block,
        sym,
        codes: codes.to_vec(),
        alphas: params.to_vec(),
    })
}

/// Writes the package for `source` (a `.pocket` file with Q4 linear layers) into `dir`.
/// Each file appears whole or not at all.
pub fn write_mnn(
    source: &ModelFile,
    dir: &Path,
    progress: &(dyn Fn(u64, u64, &str) + Sync),
) -> Result<MnnReport, FormatError> {
    let spec = source.spec().clone();
    let path = source.path();
    if spec.family == Family::Gemma3 {
        return Err(invalid(
            path,
            "Gemma 3 models are not supported by the MNN export yet (llama, qwen2, qwen3)",
        ));
    }
    if spec.o_bias || spec.mlp_bias {
        return Err(invalid(
            path,
            "biases on o_proj or the MLP are not supported by the MNN export",
        ));
    }
    let inv = spec.rope.inv_freq(spec.head_dim);
    // Every matrix must be Q4: checked before anything is created.
    let tensors = source.tensors();
    if let Some(t) = tensors
        .iter()
        .find(|t| t.shape.len() == 2 && !matches!(t.stored, Some(QuantType::Q4 { .. })))
    {
        linear(source, &tensors, &t.name, t.shape[0], t.shape[1])?;
    }
    std::fs::create_dir_all(dir).map_err(|e| FormatError::io(dir, e))?;
    let tj: Value = serde_json::from_slice(&source.tokenizer_json()?)
        .map_err(|e| invalid(path, format!("tokenizer.json: {e}")))?;
    let stop: Vec<u32> = source.generation().eos_token_ids;
    let meta = source.tokenizer_meta()?;
    // The tokens the tokenizer puts before every text (a BOS its post-processor adds).
    let prefix: Vec<u32> = match spec.bos_token_id {
        Some(b) if tj["post_processor"].to_string().contains("SpecialToken") => vec![b],
        _ => Vec::new(),
    };
    let trailer = mtok::Trailer {
        chat_template: meta.chat_template.as_deref().unwrap_or(""),
        eos: meta.eos_token.as_deref().unwrap_or(""),
        bos: meta.bos_token.as_deref().unwrap_or(""),
    };
    let (tok_name, tok_bytes) = match mtok::tokenizer_mtok(&tj, &stop, &prefix, &trailer) {
        Some(b) => (FILES[2], b),
        None => (
            TOKENIZER_TXT,
            tokenizer::tokenizer_txt(&tj, spec.vocab_size, &stop)
                .map_err(|e| invalid(path, format!("tokenizer: {e}")))?
                .into_bytes(),
        ),
    };

    let (h, hd) = (spec.hidden_size, spec.head_dim);
    let (nh, nkv, ffn) = (spec.num_heads, spec.num_kv_heads, spec.intermediate_size);
    let eps = spec.rms_norm_eps as f32;
    let total = spec.num_layers as u64 + 1;
    let mut b = Builder {
        source,
        tensors,
        g: Graph::default(),
        file: AtomicFile::create(&dir.join(FILES[0]))?,
        offset: 0,
        eps,
        placed: Vec::new(),
        linears: 0,
    };

    // Graph inputs, as MNN's engine feeds them.
    b.g.op(
        op::INPUT,
        "input_ids",
        &[],
        &["input_ids"],
        Some(input(&[1, 1, h as i32], DT_FLOAT)),
        NHWC,
    );
    b.g.op(
        op::INPUT,
        "attention_mask",
        &[],
        &["attention_mask"],
        Some(input(&[1, 1, -1, -1], DT_FLOAT)),
        NHWC,
    );
    b.g.op(
        op::INPUT,
        "position_ids",
        &[],
        &["position_ids"],
        Some(input(&[1, -1], DT_INT32)),
        NHWC,
    );
    b.g.op(
        op::INPUT,
        "logits_index",
        &[],
        &["logits_index"],
        Some(input(&[1], DT_INT32)),
        NHWC,
    );

    // Embeddings [seq, 1, H] → [seq, H, 1, 1] in NC4HW4.
    b.g.op(
        op::RESHAPE,
        "/embed/reshape",
        &["input_ids"],
        &["/embed/reshape"],
        Some(reshape(Some(&[-1, h as i32, 1, 1]))),
        NCHW,
    );
    b.g.op(
        op::CONVERT_TENSOR,
        "/embed/convert",
        &["/embed/reshape"],
        &["/embed/c4"],
        Some(convert(NCHW, NC4HW4)),
        NCHW,
    );

    // Rotary tables: cos/sin of position × inv_freq, [1, seq, 1, head_dim] ("cat(freqs, freqs)").
    b.g.op(
        op::CAST,
        "/rotary/cast",
        &["position_ids"],
        &["/rotary/pos"],
        Some(cast_to_float()),
        NHWC,
    );
    b.g.op(
        op::RESHAPE,
        "/rotary/reshape",
        &["/rotary/pos"],
        &["/rotary/pos_col"],
        Some(reshape(Some(&[-1, 1]))),
        NHWC,
    );
    b.g.op(
        op::CONST,
        "/rotary/inv_freq",
        &[],
        &["/rotary/inv_freq"],
        Some(const_f32(&inv)),
        NHWC,
    );
    b.g.op(
        op::BINARY,
        "/rotary/mul",
        &["/rotary/pos_col", "/rotary/inv_freq"],
        &["/rotary/freqs"],
        Some(binary(BIN_MUL)),
        NHWC,
    );
    for (name, f) in [("cos", UN_COS), ("sin", UN_SIN)] {
        let half = format!("/rotary/{name}_half");
        let full = format!("/rotary/{name}_full");
        let out = format!("/rotary/{name}");
        b.g.op(
            op::UNARY,
            &half,
            &["/rotary/freqs"],
            &[&half],
            Some(unary(f)),
            NHWC,
        );
        b.g.op(
            op::CONCAT,
            &full,
            &[&half, &half],
            &[&full],
            Some(axis(-1)),
            NHWC,
        );
        b.g.op(
            op::RESHAPE,
            &out,
            &[&full],
            &[&out],
            Some(reshape(Some(&[1, -1, 1, hd as i32]))),
            NHWC,
        );
    }

    // Decoder layers. The residual stream: `resid` plus a pending `delta` that the next
    // two-input LayerNorm adds before normalizing (MNN's fused add + RMSNorm).
    let mut resid = "/embed/c4".to_string();
    let mut delta: Option<String> = None;
    for l in 0..spec.num_layers {
        progress(l as u64, total, &format!("layer {l}"));
        let p = format!("model.layers.{l}");
        let n = |name: &str| (format!("{p}.{name}"), format!("/layers.{l}/{name}"));
        let (t, o) = n("input_layernorm");
        let x = b.norm(&format!("{t}.weight"), &o, &mut resid, &mut delta)?;
        let bias = spec.qkv_bias;
        let (t, o) = n("self_attn.q_proj");
        let q = b.conv(&t, &o, &x, nh * hd, h, bias)?;
        let (t, o) = n("self_attn.k_proj");
        let k = b.conv(&t, &o, &x, nkv * hd, h, bias)?;
        let (t, o) = n("self_attn.v_proj");
        let v = b.conv(&t, &o, &x, nkv * hd, h, bias)?;
        let qk_norm = if spec.family == Family::Qwen3 {
            let qn = source.read_f32(&format!("{p}.self_attn.q_norm.weight"))?;
            let kn = source.read_f32(&format!("{p}.self_attn.k_norm.weight"))?;
            Some((rms_norm_inline(eps, &qn), rms_norm_inline(eps, &kn)))
        } else {
            None
        };
        let (qr, kr) = (format!("/layers.{l}/rope/q"), format!("/layers.{l}/rope/k"));
        b.g.op(
            op::ROPE,
            &format!("/layers.{l}/rope"),
            &[&q, &k, "/rotary/cos", "/rotary/sin"],
            &[&qr, &kr],
            Some(rope(hd, nh, nkv, hd, qk_norm)),
            NHWC,
        );
        let att = format!("/layers.{l}/attention");
        b.g.op(
            op::ATTENTION,
            &att,
            &[&qr, &kr, &v, "attention_mask"],
            &[&att],
            Some(attention(l)),
            NHWC,
        );
        let (t, o) = n("self_attn.o_proj");
        delta = Some(b.conv(&t, &o, &att, h, nh * hd, false)?);
        let (t, o) = n("post_attention_layernorm");
        let x = b.norm(&format!("{t}.weight"), &o, &mut resid, &mut delta)?;
        let (t, o) = n("mlp.gate_proj");
        let gate = b.conv(&t, &o, &x, ffn, h, false)?;
        let (t, o) = n("mlp.up_proj");
        let up = b.conv(&t, &o, &x, ffn, h, false)?;
        let act = format!("/layers.{l}/mlp/act");
        // MUL_SILU(a, b) = a · silu(b), operands in the order MNN's exporter gives them.
        b.g.op(
            op::BINARY,
            &act,
            &[&up, &gate],
            &[&act],
            Some(binary(BIN_MUL_SILU)),
            NC4HW4,
        );
        let (t, o) = n("mlp.down_proj");
        delta = Some(b.conv(&t, &o, &act, h, ffn, false)?);
    }
    progress(spec.num_layers as u64, total, "head");
    let last = delta.take().expect("at least one layer");
    b.g.op(
        op::BINARY,
        "/final/residual",
        &[&resid, &last],
        &["/final/residual"],
        Some(binary(BIN_ADD)),
        NC4HW4,
    );
    b.g.op(
        op::CONST,
        "/final/slice_end",
        &[],
        &["/final/slice_end"],
        Some(const_i32(&[1], &[1 << 30])),
        NHWC,
    );
    b.g.op(
        op::CONST,
        "/final/slice_axis",
        &[],
        &["/final/slice_axis"],
        Some(const_i32(&[1], &[0])),
        NHWC,
    );
    b.g.op(
        op::CONST,
        "/final/slice_step",
        &[],
        &["/final/slice_step"],
        Some(const_i32(&[1], &[1])),
        NHWC,
    );
    b.g.op(
        op::STRIDED_SLICE,
        "/final/slice",
        &[
            "/final/residual",
            "logits_index",
            "/final/slice_end",
            "/final/slice_axis",
            "/final/slice_step",
        ],
        &["/final/slice"],
        Some(onnx_slice()),
        NC4HW4,
    );
    b.norm(
        "model.norm.weight",
        "hidden_states",
        &mut "/final/slice".to_string(),
        &mut None,
    )?;
    let tied = spec.tie_word_embeddings;
    let head_prefix = if tied {
        "model.embed_tokens"
    } else {
        "lm_head"
    };
    let head = b.conv(
        head_prefix,
        "/lm_head",
        "hidden_states",
        spec.vocab_size,
        h,
        false,
    )?;
    let tie = if tied {
        // The engine reads embedding rows from the head's blob in llm.mnn.weight.
        let placed = b.placed.last().expect("just placed");
        let ext = &placed.external;
        json!({
            "weight_offset": ext[0] + blob::conv_header(spec.vocab_size, h).len() as i64,
            "alpha_offset": ext[0] + ext[1],
            "alpha_size": ext[2],
            "quant_bit": 4,
            "quant_block": placed.block,
            "alpha_dtype": "fp16",
        })
    } else {
        // A file of its own; `weight_offset` 0 tells the engine to open `embedding_file`.
        let e = linear(
            source,
            &b.tensors,
            "model.embed_tokens.weight",
            spec.vocab_size,
            h,
        )?;
        let mut bytes = e.codes.clone();
        bytes.extend_from_slice(&e.alphas);
        write_atomic(&dir.join(EMBEDDINGS), &bytes)?;
        b.placed.push(MnnTensor {
            name: "model.embed_tokens.weight".into(),
            external: vec![0, e.codes.len() as i64, e.alphas.len() as i64],
            block: Some(e.block),
        });
        json!({
            "weight_offset": 0,
            "alpha_offset": e.codes.len(),
            "alpha_size": e.alphas.len(),
            "quant_bit": 4,
            "quant_block": e.block,
            "alpha_dtype": "fp16",
        })
    };
    b.g.op(
        op::CONVERT_TENSOR,
        "/lm_head/convert",
        &[&head],
        &["/lm_head/nchw"],
        Some(convert(NC4HW4, NCHW)),
        NHWC,
    );
    b.g.op(
        op::RESHAPE,
        "logits",
        &["/lm_head/nchw"],
        &["logits"],
        Some(reshape(Some(&[1, -1, spec.vocab_size as i32]))),
        NHWC,
    );
    let Builder {
        g,
        file,
        placed,
        linears,
        ..
    } = b;
    let ops = g.ops.len();
    let net = fb::finish(&g.net(&["logits", "hidden_states"]));
    file.commit()?;
    write_atomic(&dir.join(FILES[1]), &net)?;
    write_atomic(&dir.join(tok_name), &tok_bytes)?;

    let mut jinja = serde_json::Map::new();
    if let Some(t) = &meta.chat_template {
        jinja.insert("chat_template".into(), json!(t));
    }
    if let Some(b) = &meta.bos_token {
        jinja.insert("bos".into(), json!(b));
    }
    if let Some(e) = &meta.eos_token {
        jinja.insert("eos".into(), json!(e));
    }
    let llm_config = json!({
        "model_type": spec.family.as_str(),
        "hidden_size": h,
        "layer_nums": spec.num_layers,
        "attention_mask": "float",
        "attention_type": "full",
        "is_mrope": false,
        "attn_scale": 1.0 / (hd as f64).sqrt(),
        "jinja": jinja,
        "tie_embeddings": tie,
    });
    write_atomic(
        &dir.join(FILES[3]),
        serde_json::to_string_pretty(&llm_config)
            .expect("json")
            .as_bytes(),
    )?;
    let gen = source.generation();
    let mut config = json!({
        "llm_model": FILES[1],
        "llm_weight": FILES[0],
        "tokenizer_file": tok_name,
        "backend_type": "cpu",
        "thread_num": 4,
        "precision": "low",
        "memory": "low",
        "sampler_type": if gen.do_sample == Some(false) { "greedy" } else { "mixed" },
        "temperature": gen.temperature.unwrap_or(0.8),
        "top_k": gen.top_k.unwrap_or(40),
        "top_p": gen.top_p.unwrap_or(0.9),
        "min_p": gen.min_p.unwrap_or(0.05),
        "tfs_z": 1.0,
        "typical": 0.95,
        "repetition_penalty": gen.repetition_penalty.unwrap_or(1.0),
        "max_new_tokens": 512,
    });
    if !tied {
        config["embedding_file"] = json!(EMBEDDINGS);
    }
    write_atomic(
        &dir.join(FILES[4]),
        serde_json::to_string_pretty(&config)
            .expect("json")
            .as_bytes(),
    )?;
    progress(total, total, "done");

    let mut files = Vec::new();
    let written = [FILES[0], FILES[1], tok_name, FILES[3], FILES[4]];
    for f in written
        .iter()
        .chain(if tied { None } else { Some(&EMBEDDINGS) })
    {
        let n = std::fs::metadata(dir.join(f))
            .map_err(|e| FormatError::io(dir.join(f), e))?
            .len();
        files.push((f.to_string(), n));
    }
    Ok(MnnReport {
        output: dir.display().to_string(),
        total_bytes: files.iter().map(|f| f.1).sum(),
        files,
        ops,
        linear_layers: linears,
        tensors: placed,
    })
}
