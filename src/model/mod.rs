//! The decoder: one implementation for Llama, Qwen2, Qwen3 and Gemma 3, with the family
//! differences as small switches (biases, q/k norm, tied head, Gemma's extra norms, GELU,
//! sliding windows) read from [`ModelSpec`]. Weight names are the
//! Hugging Face ones, so this file reads side by side with transformers' modeling code.

mod adapt;
mod attach;
mod forward;
mod linear;
mod lora_group;
pub mod merge;
mod probe;
mod rows;
mod state;

pub use linear::{Linear, Observer, Site};
pub use state::State;

use crate::config::EngineConfig;
use crate::kernels::gate::gate_mul;
use crate::kernels::gate::Gate;
use crate::kernels::norm::rms_norm_in_place;
use crate::kernels::Cpu;
use crate::kv_cache::{KvCache, KvPrecision};
use crate::rope::Rope;
use crate::weights::Matrix;
use crate::Error;
use pocket_formats::hf::{Activation, ModelSpec};
use pocket_formats::model_file::ModelFile;

/// Prompt tokens run per pass: bounds the activations' memory at long prompts. Every caller
/// that runs a prompt (the generation loops, a draft model catching up, decisions, the
/// server's scheduler) cuts it here, so their runs, and their rounding, agree.
pub const PREFILL_CHUNK: usize = 256;

/// How many leading ids `a` and `b` share: what a cache holding `a` can keep for `b`.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Which logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
}

/// What [`Model::forward_picked`] returns for its picked rows.
#[derive(Debug, Default)]
pub struct Picked {
    /// Each picked row's hidden state after the final norm (the head's input), `rows × hidden`.
    pub hidden: Vec<f32>,
    /// Each picked row's logits, `rows × vocab` (empty unless asked for).
    pub logits: Vec<f32>,
}

pub struct Layer {
    pub input_norm: Vec<f32>,
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    /// Qwen3's and Gemma's per-head RMSNorm weights (size head_dim).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// Gemma: the norm of the attention output, before the residual add.
    pub attn_out_norm: Option<Vec<f32>>,
    /// The MLP's input norm (HF `post_attention_layernorm`; Gemma's `pre_feedforward_layernorm`).
    pub mlp_norm: Vec<f32>,
    /// Gemma: the norm of the MLP output, before the residual add.
    pub mlp_out_norm: Option<Vec<f32>>,
    /// A sliding-window layer attends only this many latest positions, and rotates with the
    /// model's local RoPE.
    pub window: Option<usize>,
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

pub struct Model {
    pub spec: ModelSpec,
    pub embed_tokens: Matrix,
    pub layers: Vec<Layer>,
    pub norm: Vec<f32>,
    /// `None` when the head is tied to `embed_tokens`.
    pub lm_head: Option<Matrix>,
    rope: Rope,
    /// The sliding-window layers' RoPE (Gemma's local base).
    rope_local: Option<Rope>,
    /// The kernels, activation precision and KV cache type this model runs with.
    pub config: EngineConfig,
    /// The LoRA adapters new states run with (`--lora`); a state may carry others.
    pub lora: Option<std::sync::Arc<crate::lora::AdapterSet>>,
}

impl Model {
    /// Builds the model over a file's memory-mapped tensors (no weight matrix is copied,
    /// though the SIMD kernels' layouts may be packed from them).
    pub fn load(file: &ModelFile, config: EngineConfig) -> Result<Model, Error> {
        let spec = file.spec();
        spec.check_limits().map_err(Error::Invalid)?;
        if matches!(config.kv, KvPrecision::Q8 | KvPrecision::Q4)
            && crate::kernels::attn::q8_block(spec.head_dim).is_none()
        {
            return Err(Error::Invalid(format!(
                "a quantized KV cache (--kv {}) needs head_dim a multiple of 16; this model's is \
                 {} (use --kv f16)",
                config.kv.name(),
                spec.head_dim
            )));
        }
        let s = spec;
        let (h, q_dim, kv_dim) = (
            s.hidden_size,
            s.num_heads * s.head_dim,
            s.num_kv_heads * s.head_dim,
        );
        let matrix =
            |name: &str, rows, cols| Matrix::from_stored(file.stored(name)?, rows, cols, config);
        let vector = |name: &str, len: usize| -> Result<Vec<f32>, Error> {
            let t = file.stored(name)?;
            t.expect_shape(&[len])?;
            Ok(t.to_f32()?)
        };
        // Gemma's norms scale by 1 + w: folded into the weight once here.
        let norm = |name: &str, len| -> Result<Vec<f32>, Error> {
            let mut w = vector(name, len)?;
            if s.norm_offset {
                w.iter_mut().for_each(|x| *x += 1.0);
            }
            Ok(w)
        };
        let linear = |name: &str, rows, cols, bias: bool| -> Result<Linear, Error> {
            Ok(Linear {
                weight: matrix(&format!("{name}.weight"), rows, cols)?,
                bias: if bias {
                    Some(vector(&format!("{name}.bias"), rows)?)
                } else {
                    None
                },
            })
        };
        let mut layers = Vec::with_capacity(s.num_layers);
        for i in 0..s.num_layers {
            let p = format!("model.layers.{i}");
            let (a, m) = (format!("{p}.self_attn"), format!("{p}.mlp"));
            let sandwich = |name: &str| -> Result<Option<Vec<f32>>, Error> {
                match s.sandwich_norms {
                    true => Ok(Some(norm(&format!("{p}.{name}.weight"), h)?)),
                    false => Ok(None),
                }
            };
            let mlp_norm = match s.sandwich_norms {
                true => "pre_feedforward_layernorm",
                false => "post_attention_layernorm",
            };
            layers.push(Layer {
                input_norm: norm(&format!("{p}.input_layernorm.weight"), h)?,
                q_proj: linear(&format!("{a}.q_proj"), q_dim, h, s.qkv_bias)?,
                k_proj: linear(&format!("{a}.k_proj"), kv_dim, h, s.qkv_bias)?,
                v_proj: linear(&format!("{a}.v_proj"), kv_dim, h, s.qkv_bias)?,
                o_proj: linear(&format!("{a}.o_proj"), h, q_dim, s.o_bias)?,
                q_norm: if s.qk_norm {
                    Some(norm(&format!("{a}.q_norm.weight"), s.head_dim)?)
                } else {
                    None
                },
                k_norm: if s.qk_norm {
                    Some(norm(&format!("{a}.k_norm.weight"), s.head_dim)?)
                } else {
                    None
                },
                attn_out_norm: sandwich("post_attention_layernorm")?,
                mlp_norm: norm(&format!("{p}.{mlp_norm}.weight"), h)?,
                mlp_out_norm: sandwich("post_feedforward_layernorm")?,
                window: s.window(i),
                gate_proj: linear(
                    &format!("{m}.gate_proj"),
                    s.intermediate_size,
                    h,
                    s.mlp_bias,
                )?,
                up_proj: linear(&format!("{m}.up_proj"), s.intermediate_size, h, s.mlp_bias)?,
                down_proj: linear(
                    &format!("{m}.down_proj"),
                    h,
                    s.intermediate_size,
                    s.mlp_bias,
                )?,
            });
        }
        let lm_head = if s.tie_word_embeddings {
            None
        } else {
            Some(matrix("lm_head.weight", s.vocab_size, h)?)
        };
        Ok(Model {
            embed_tokens: matrix("model.embed_tokens.weight", s.vocab_size, h)?,
            layers,
            norm: norm("model.norm.weight", h)?,
            lm_head,
            rope: Rope::new(&s.rope, s.head_dim),
            rope_local: s.sliding.as_ref().map(|sl| Rope::new(&sl.rope, s.head_dim)),
            spec: s.clone(),
            config,
            lora: None,
        })
    }

    /// Bytes of weights one decode step reads (every layer's matrices and the head; the
    /// embedding only when it is the head): what a step costs, as decoding is memory-bound.
    pub fn step_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .flat_map(Layer::linears)
            .map(|l| l.weight.stored_bytes())
            .sum();
        layers
            + self
                .lm_head
                .as_ref()
                .unwrap_or(&self.embed_tokens)
                .stored_bytes()
    }

    /// Whether a prompt token's logits and cache entries are the same however the run of
    /// tokens around it is cut into passes of two tokens or more: true unless a layer takes
    /// the W4A16 kernels (Q4 weights with `--activations f32`). Prompts sharing a beginning
    /// can then continue from any shared position ([`crate::generate::resume_point`]).
    pub fn prompt_cuts_exact(&self) -> bool {
        self.layers
            .iter()
            .flat_map(Layer::linears)
            .all(|l| l.weight.rows_batch_independent())
    }

    /// A fresh decoding state with room for `context` positions, its KV cache in the model's
    /// precision ([`EngineConfig::kv`]).
    pub fn new_state(&self, context: usize) -> State {
        self.new_state_kv(context, self.config.kv)
    }

    /// Bytes a KV cache in `precision` holds once `context` positions are in it (a
    /// sliding-window layer holds its ring at most): what `--ctx` is checked against before a
    /// cache is made.
    pub fn kv_bytes(&self, context: usize, precision: KvPrecision) -> usize {
        let s = &self.spec;
        self.layers
            .iter()
            .map(|l| {
                let held = l
                    .window
                    .map_or(context, |w| context.min(crate::kv_cache::ring_slots(w)));
                precision.head_bytes(s.head_dim, held) * s.num_kv_heads
            })
            .sum()
    }

    /// A state over `cache` (a fork of another state's, say).
    pub fn state_with(&self, cache: KvCache) -> State {
        let s = &self.spec;
        let mut st = State::new(cache, s.hidden_size, s.vocab_size);
        st.lora = self.lora.clone();
        st
    }

    /// [`Model::new_state`] with the KV cache in `precision` (f32: the exact reference).
    pub fn new_state_kv(&self, context: usize, precision: KvPrecision) -> State {
        // Here rather than at load: what loading freed (the tokenizer's buffers) goes back to
        // the system first.
        state::keep_large_buffers_on_the_heap();
        let s = &self.spec;
        let cache = KvCache::new(s.num_layers, s.num_kv_heads, s.head_dim, context, precision)
            .with_windows(&self.layers.iter().map(|l| l.window).collect::<Vec<_>>());
        self.state_with(cache)
    }

    /// A context shift on `state`'s cache: drops positions `from..from + count` and moves the
    /// later ones down, each key rotated back by `count` positions with its layer's RoPE (the
    /// values carry no position). The moved positions keep what they computed while the
    /// dropped ones were still there (llama.cpp's context shift makes the same trade): no
    /// token runs again. False, with nothing changed, when a layer keeps a sliding-window ring.
    pub fn shift_cache(&self, state: &mut State, from: usize, count: usize) -> bool {
        let d = self.spec.head_dim;
        let rotate = |layer: usize, key: &mut [f32]| {
            self.rope_of(&self.layers[layer])
                .rotate_by(key, d, -(count as i64))
        };
        state.cache.shift(from, count, &rotate)
    }

    /// The RoPE a layer rotates with.
    fn rope_of(&self, layer: &Layer) -> &Rope {
        match (layer.window, &self.rope_local) {
            (Some(_), Some(local)) => local,
            _ => &self.rope,
        }
    }

    /// The output head a sequence with adapters `lora` runs: an adapter's new head, else the
    /// base's (`lm_head`, or the tied embedding).
    pub(crate) fn head_for<'a>(&'a self, lora: Option<&'a crate::lora::AdapterSet>) -> &'a Matrix {
        lora.and_then(|l| l.new_head())
            .or(self.lm_head.as_ref())
            .unwrap_or(&self.embed_tokens)
    }

    /// What embeddings are multiplied by: Gemma's sqrt(hidden_size), else 1.
    fn embedding_scale(&self) -> f32 {
        if self.spec.scale_embeddings {
            (self.spec.hidden_size as f32).sqrt()
        } else {
            1.0
        }
    }

    /// Gemma multiplies embeddings by sqrt(hidden_size) (in f32, as llama.cpp does).
    fn scale_embedding(&self, x: &mut [f32]) {
        if self.spec.scale_embeddings {
            let scale = (self.spec.hidden_size as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= scale);
        }
    }

    /// The logits of just `ids` for a final-normed hidden state (a row of the head each, in
    /// f32 with an f64 sum): what a readout over a few tokens needs, without the head's
    /// whole-vocabulary product.
    pub fn logits_of(
        &self,
        hidden: &[f32],
        ids: &[u32],
        lora: Option<&crate::lora::AdapterSet>,
    ) -> Vec<f32> {
        let head = self.head_for(lora);
        let mut row = vec![0.0f32; self.spec.hidden_size];
        let mut out: Vec<f32> = ids
            .iter()
            .map(|&id| {
                head.row(id as usize, &mut row);
                row.iter()
                    .zip(hidden)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>() as f32
            })
            .collect();
        if let Some(set) = lora.filter(|l| !l.is_empty()) {
            adapt::add_head_ids(self.config.cpu, set, hidden, ids, &mut out);
        }
        self.softcap(&mut out);
        out
    }

    /// `cap · tanh(logits / cap)` when the model soft-caps its logits.
    fn softcap(&self, logits: &mut [f32]) {
        if let Some(cap) = self.spec.final_logit_softcap {
            let cap = cap as f32;
            logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
        }
    }

    /// The MLP's gate activation times `up`, into `gate`.
    fn gate_act(&self, gate: &mut [f32], up: &[f32]) {
        match self.spec.activation {
            Activation::Silu => gate_mul(self.config.cpu, Gate::Silu, gate, up),
            Activation::GeluTanh => gate_mul(self.config.cpu, Gate::GeluTanh, gate, up),
        }
    }
}

impl Model {
    fn check_tokens(&self, tokens: &[u32]) -> Result<(), Error> {
        let vocab = self.spec.vocab_size;
        match tokens.iter().find(|&&t| t as usize >= vocab) {
            Some(t) => Err(Error::Invalid(format!(
                "token id {t} is outside the vocabulary ({vocab})"
            ))),
            None => Ok(()),
        }
    }

    /// The embedding rows of `tokens`, one after another.
    fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        let h = self.spec.hidden_size;
        let mut x = vec![0.0f32; tokens.len() * h];
        for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
            self.embed_tokens.row(t as usize, row);
            self.scale_embedding(row);
        }
        x
    }
}

impl Layer {
    /// The layer's seven linear layers (attention's four, then the MLP's three).
    pub fn linears(&self) -> [&Linear; 7] {
        [
            &self.q_proj,
            &self.k_proj,
            &self.v_proj,
            &self.o_proj,
            &self.gate_proj,
            &self.up_proj,
            &self.down_proj,
        ]
    }

    /// Qwen3's and Gemma's per-head RMSNorm of queries and keys (no-op for the others).
    fn qk_norm(&self, cpu: Cpu, q: &mut [f32], k: &mut [f32], head_dim: usize, eps: f32) {
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q.chunks_exact_mut(head_dim)
                .for_each(|h| rms_norm_in_place(cpu, h, qn, eps));
            k.chunks_exact_mut(head_dim)
                .for_each(|h| rms_norm_in_place(cpu, h, kn, eps));
        }
    }
}
