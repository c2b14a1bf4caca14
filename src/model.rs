//! The decoder: one implementation for Llama, Qwen2 and Qwen3, with the family differences as
//! small switches (biases, q/k norm, tied head) read from [`ModelSpec`]. Weight names are the
//! Hugging Face ones, so this file reads side by side with transformers' modeling code.

use crate::kv_cache::KvCache;
use crate::ops::{add_in_place, dot, rms_norm, rms_norm_in_place, silu_mul, softmax};
use crate::rope::Rope;
use crate::weights::{load_vector, Matrix};
use crate::Error;
use pocket_formats::hf::{HfCheckpoint, ModelSpec};

/// A linear layer: weight and optional bias.
pub struct Linear {
    pub weight: Matrix,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    pub fn forward(&self, x: &[f32], y: &mut [f32]) {
        self.weight.matvec(x, y);
        if let Some(b) = &self.bias {
            add_in_place(y, b);
        }
    }
}

pub struct Layer {
    pub input_norm: Vec<f32>,
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    /// Qwen3's per-head RMSNorm weights (size head_dim).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub post_attention_norm: Vec<f32>,
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
}

impl Model {
    /// Builds the model over a checkpoint's memory-mapped tensors (no weight is copied).
    pub fn from_checkpoint(ckpt: &HfCheckpoint) -> Result<Model, Error> {
        let s = &ckpt.spec;
        let (h, q_dim, kv_dim) = (
            s.hidden_size,
            s.num_heads * s.head_dim,
            s.num_kv_heads * s.head_dim,
        );
        let matrix = |name: &str, rows, cols| Matrix::from_tensor(ckpt.tensor(name)?, rows, cols);
        let vector = |name: &str, len| load_vector(ckpt.tensor(name)?, len);
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
            layers.push(Layer {
                input_norm: vector(&format!("{p}.input_layernorm.weight"), h)?,
                q_proj: linear(&format!("{a}.q_proj"), q_dim, h, s.qkv_bias)?,
                k_proj: linear(&format!("{a}.k_proj"), kv_dim, h, s.qkv_bias)?,
                v_proj: linear(&format!("{a}.v_proj"), kv_dim, h, s.qkv_bias)?,
                o_proj: linear(&format!("{a}.o_proj"), h, q_dim, s.o_bias)?,
                q_norm: if s.qk_norm {
                    Some(vector(&format!("{a}.q_norm.weight"), s.head_dim)?)
                } else {
                    None
                },
                k_norm: if s.qk_norm {
                    Some(vector(&format!("{a}.k_norm.weight"), s.head_dim)?)
                } else {
                    None
                },
                post_attention_norm: vector(&format!("{p}.post_attention_layernorm.weight"), h)?,
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
            norm: vector("model.norm.weight", h)?,
            lm_head,
            rope: Rope::new(&s.rope, s.head_dim),
            spec: s.clone(),
        })
    }

    /// A fresh decoding state with room for `context` positions.
    pub fn new_state(&self, context: usize) -> State {
        let s = &self.spec;
        State {
            cache: KvCache::new(s.num_layers, s.num_kv_heads, s.head_dim, context),
            x: vec![0.0; s.hidden_size],
            xn: vec![0.0; s.hidden_size],
            q: vec![0.0; s.num_heads * s.head_dim],
            k: vec![0.0; s.num_kv_heads * s.head_dim],
            v: vec![0.0; s.num_kv_heads * s.head_dim],
            attn: vec![0.0; s.num_heads * s.head_dim],
            scores: Vec::new(),
            gate: vec![0.0; s.intermediate_size],
            up: vec![0.0; s.intermediate_size],
            logits: vec![0.0; s.vocab_size],
        }
    }

    /// Runs one token at the next position of `state`. Returns the logits when `want_logits`
    /// (prefill skips the head for all but the last prompt token).
    pub fn step<'s>(
        &self,
        state: &'s mut State,
        token: u32,
        want_logits: bool,
    ) -> Result<Option<&'s [f32]>, Error> {
        let s = &self.spec;
        let pos = state.cache.len();
        if pos >= state.cache.capacity() {
            return Err(Error::Invalid(format!(
                "context is full ({} positions)",
                state.cache.capacity()
            )));
        }
        if token as usize >= s.vocab_size {
            return Err(Error::Invalid(format!(
                "token id {token} is outside the vocabulary ({})",
                s.vocab_size
            )));
        }
        let eps = s.rms_norm_eps as f32;
        self.embed_tokens.row(token as usize, &mut state.x);
        for (li, layer) in self.layers.iter().enumerate() {
            // Attention block.
            rms_norm(&state.x, &layer.input_norm, eps, &mut state.xn);
            layer.q_proj.forward(&state.xn, &mut state.q);
            layer.k_proj.forward(&state.xn, &mut state.k);
            layer.v_proj.forward(&state.xn, &mut state.v);
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                state
                    .q
                    .chunks_exact_mut(s.head_dim)
                    .for_each(|h| rms_norm_in_place(h, qn, eps));
                state
                    .k
                    .chunks_exact_mut(s.head_dim)
                    .for_each(|h| rms_norm_in_place(h, kn, eps));
            }
            self.rope.apply(&mut state.q, s.head_dim, pos);
            self.rope.apply(&mut state.k, s.head_dim, pos);
            state.cache.push(li, &state.k, &state.v);
            self.attention(state, li, pos + 1);
            layer.o_proj.forward(&state.attn, &mut state.xn);
            add_in_place(&mut state.x, &state.xn);

            // MLP block (SwiGLU).
            rms_norm(&state.x, &layer.post_attention_norm, eps, &mut state.xn);
            layer.gate_proj.forward(&state.xn, &mut state.gate);
            layer.up_proj.forward(&state.xn, &mut state.up);
            silu_mul(&mut state.gate, &state.up);
            layer.down_proj.forward(&state.gate, &mut state.xn);
            add_in_place(&mut state.x, &state.xn);
        }
        if !want_logits {
            return Ok(None);
        }
        rms_norm(&state.x, &self.norm, eps, &mut state.xn);
        self.lm_head
            .as_ref()
            .unwrap_or(&self.embed_tokens)
            .matvec(&state.xn, &mut state.logits);
        Ok(Some(&state.logits))
    }

    /// Causal attention of the current query over `n` cached positions; each query head reads
    /// the KV head its group shares (GQA).
    fn attention(&self, state: &mut State, layer: usize, n: usize) {
        let s = &self.spec;
        let (d, kv_row) = (s.head_dim, s.num_kv_heads * s.head_dim);
        let scale = 1.0 / (d as f32).sqrt();
        let (keys, values) = state.cache.layer(layer);
        state.scores.resize(n, 0.0);
        for h in 0..s.num_heads {
            let kv = h / s.group_size();
            let q = &state.q[h * d..(h + 1) * d];
            for (t, score) in state.scores.iter_mut().enumerate() {
                *score = dot(q, &keys[t * kv_row + kv * d..][..d]) * scale;
            }
            softmax(&mut state.scores);
            let out = &mut state.attn[h * d..(h + 1) * d];
            out.fill(0.0);
            for (t, &p) in state.scores.iter().enumerate() {
                for (o, &v) in out.iter_mut().zip(&values[t * kv_row + kv * d..][..d]) {
                    *o += p * v;
                }
            }
        }
    }
}

/// Per-conversation decoding state: the KV cache and scratch buffers, so a step allocates
/// nothing.
pub struct State {
    pub cache: KvCache,
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    scores: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    logits: Vec<f32>,
}
