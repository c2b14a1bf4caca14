//! The decoder: one implementation for Llama, Qwen2, Qwen3 and Gemma 3, with the family
//! differences as small switches (biases, q/k norm, tied head, Gemma's extra norms, GELU,
//! sliding windows) read from [`ModelSpec`]. Weight names are the
//! Hugging Face ones, so this file reads side by side with transformers' modeling code.

use crate::attention::attend;
use crate::config::EngineConfig;
use crate::kv_cache::{KvCache, KvPrecision};
use crate::ops::{add_in_place, gelu_tanh_mul, rms_norm, rms_norm_in_place, silu_mul};
use crate::rope::Rope;
use crate::weights::{Matrix, WeightSource};
use crate::Error;
use pocket_formats::hf::{Activation, ModelSpec};
use rayon::prelude::*;

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

    /// Several layers applied to the same input, as one job on the worker pool.
    pub fn forward_group(ls: &[&Linear], x: &[f32], ys: &mut [&mut [f32]]) {
        let ms: Vec<&Matrix> = ls.iter().map(|l| &l.weight).collect();
        Matrix::matvec_group(&ms, x, ys);
        for (l, y) in ls.iter().zip(ys.iter_mut()) {
            if let Some(b) = &l.bias {
                add_in_place(y, b);
            }
        }
    }

    /// Several layers applied to the same `n` rows (q/k/v, gate/up): one pass over the
    /// tokens, their activations quantized once (see [`Matrix::matmul_group`]).
    pub fn forward_batch_group<const N: usize>(
        ls: [&Linear; N],
        x: &[f32],
        n: usize,
    ) -> [Vec<f32>; N] {
        let ms = ls.map(|l| &l.weight);
        let mut ys = ls.map(|l| vec![0.0f32; n * l.weight.rows]);
        {
            let mut refs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
            Matrix::matmul_group(&ms, x, n, &mut refs);
        }
        for (l, y) in ls.iter().zip(ys.iter_mut()) {
            if let Some(b) = &l.bias {
                y.par_chunks_exact_mut(l.weight.rows)
                    .with_min_len(rows_per_task(l.weight.rows))
                    .for_each(|row| add_in_place(row, b));
            }
        }
        ys
    }

    /// The layer applied to `n` rows of `x` at once.
    pub fn forward_batch(&self, x: &[f32], n: usize) -> Vec<f32> {
        let [y] = Linear::forward_batch_group([self], x, n);
        y
    }
}

/// Where a linear layer's input is seen by an [`Observer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The normed input of q/k/v_proj.
    AttnIn,
    /// The attention output, o_proj's input.
    AttnOut,
    /// The normed input of gate/up_proj.
    MlpIn,
    /// SiLU(gate)·up, down_proj's input.
    MlpDown,
    /// The final normed hidden state, the head's input (layer index = number of layers).
    Head,
}

impl Site {
    /// The HF names of the weights that read this input in `layer`.
    pub fn weights(self, layer: usize, tied: bool) -> Vec<String> {
        let p = format!("model.layers.{layer}");
        match self {
            Site::AttnIn => ["q_proj", "k_proj", "v_proj"]
                .iter()
                .map(|n| format!("{p}.self_attn.{n}.weight"))
                .collect(),
            Site::AttnOut => vec![format!("{p}.self_attn.o_proj.weight")],
            Site::MlpIn => ["gate_proj", "up_proj"]
                .iter()
                .map(|n| format!("{p}.mlp.{n}.weight"))
                .collect(),
            Site::MlpDown => vec![format!("{p}.mlp.down_proj.weight")],
            Site::Head if tied => vec!["model.embed_tokens.weight".into()],
            Site::Head => vec!["lm_head.weight".into()],
        }
    }
}

/// Sees the input rows (`n × width`, row-major) of each linear layer during a batched pass.
pub trait Observer {
    fn observe(&mut self, layer: usize, site: Site, rows: &[f32]);
}

/// Which logits a batched forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
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
}

impl Model {
    /// Builds the model over memory-mapped tensors (no weight matrix is copied).
    pub fn load(
        spec: &ModelSpec,
        src: &dyn WeightSource,
        config: EngineConfig,
    ) -> Result<Model, Error> {
        spec.check_limits().map_err(Error::Invalid)?;
        let s = spec;
        let (h, q_dim, kv_dim) = (
            s.hidden_size,
            s.num_heads * s.head_dim,
            s.num_kv_heads * s.head_dim,
        );
        let matrix = |name: &str, rows, cols| src.matrix(name, rows, cols, config);
        let vector = |name: &str, len| src.vector(name, len);
        // Gemma's norms scale by 1 + w: folded into the weight once here.
        let norm = |name: &str, len| -> Result<Vec<f32>, Error> {
            let mut w = src.vector(name, len)?;
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
        })
    }

    /// A fresh decoding state with room for `context` positions, its KV cache in the model's
    /// precision ([`EngineConfig::kv`]).
    pub fn new_state(&self, context: usize) -> State {
        self.new_state_kv(context, self.config.kv)
    }

    /// [`Model::new_state`] with the KV cache in `precision` (f32: the exact reference).
    pub fn new_state_kv(&self, context: usize, precision: KvPrecision) -> State {
        // Here rather than at load: what loading freed (the tokenizer's buffers) goes back to
        // the system first.
        keep_large_buffers_on_the_heap();
        let s = &self.spec;
        State {
            cache: KvCache::new(s.num_layers, s.num_kv_heads, s.head_dim, context, precision)
                .with_windows(&self.layers.iter().map(|l| l.window).collect::<Vec<_>>()),
            x: vec![0.0; s.hidden_size],
            xn: vec![0.0; s.hidden_size],
            q: vec![0.0; s.num_heads * s.head_dim],
            k: vec![0.0; s.num_kv_heads * s.head_dim],
            v: vec![0.0; s.num_kv_heads * s.head_dim],
            attn: vec![0.0; s.num_heads * s.head_dim],
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
        check_room(&state.cache, 1)?;
        self.check_tokens(&[token])?;
        let eps = s.rms_norm_eps as f32;
        self.embed_tokens.row(token as usize, &mut state.x);
        self.scale_embedding(&mut state.x);
        for (li, layer) in self.layers.iter().enumerate() {
            // Attention block.
            rms_norm(&state.x, &layer.input_norm, eps, &mut state.xn);
            Linear::forward_group(
                &[&layer.q_proj, &layer.k_proj, &layer.v_proj],
                &state.xn,
                &mut [&mut state.q, &mut state.k, &mut state.v],
            );
            layer.qk_norm(&mut state.q, &mut state.k, s.head_dim, eps);
            self.rope_of(layer)
                .apply_pair(&mut state.q, &mut state.k, s.head_dim, pos);
            state.cache.push(li, &state.k, &state.v);
            self.attention(state, li, pos + 1);
            layer.o_proj.forward(&state.attn, &mut state.xn);
            if let Some(w) = &layer.attn_out_norm {
                rms_norm_in_place(&mut state.xn, w, eps);
            }
            add_in_place(&mut state.x, &state.xn);

            // MLP block (gated: SwiGLU, or GELU for Gemma).
            rms_norm(&state.x, &layer.mlp_norm, eps, &mut state.xn);
            Linear::forward_group(
                &[&layer.gate_proj, &layer.up_proj],
                &state.xn,
                &mut [&mut state.gate, &mut state.up],
            );
            self.gate_act(&mut state.gate, &state.up);
            layer.down_proj.forward(&state.gate, &mut state.xn);
            if let Some(w) = &layer.mlp_out_norm {
                rms_norm_in_place(&mut state.xn, w, eps);
            }
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
        self.softcap(&mut state.logits);
        Ok(Some(&state.logits))
    }

    /// Runs `tokens` at the next positions of `state` as one batch: every weight row is decoded
    /// once for the whole batch (prompt prefill, perplexity). Same math as [`Model::step`].
    /// Returns `n × vocab` logits for `Logits::All`, `vocab` for `Logits::Last`.
    pub fn forward_batch(
        &self,
        state: &mut State,
        tokens: &[u32],
        want: Logits,
    ) -> Result<Vec<f32>, Error> {
        self.forward_batch_observed(state, tokens, want, None)
    }

    /// [`Model::forward_batch`], showing every linear layer's input rows to `obs` (activation
    /// statistics for calibrated quantization).
    pub fn forward_batch_observed(
        &self,
        state: &mut State,
        tokens: &[u32],
        want: Logits,
        mut obs: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>, Error> {
        let s = &self.spec;
        let (n, h, d) = (tokens.len(), s.hidden_size, s.head_dim);
        let pos = state.cache.len();
        check_room(&state.cache, n)?;
        self.check_tokens(tokens)?;
        let eps = s.rms_norm_eps as f32;
        let mut x = self.embed(tokens);
        let norm_rows = |x: &[f32], w: &[f32]| norm_rows(x, w, eps);
        let observing = obs.is_some();
        let mut see = |layer: usize, site: Site, rows: &[f32]| {
            if let Some(o) = obs.as_deref_mut() {
                o.observe(layer, site, rows);
            }
        };
        for (li, layer) in self.layers.iter().enumerate() {
            let xn = norm_rows(&x, &layer.input_norm);
            see(li, Site::AttnIn, &xn);
            let [mut q, mut k, v] = layer.qkv_batch(&xn, n);
            let (q_row, kv_row) = (s.num_heads * d, s.num_kv_heads * d);
            self.rotate_rows(layer, &mut q, &mut k, |t| pos + t);
            let mut attn = vec![0.0f32; n * q_row];
            // A ring (sliding-window layer) takes the batch in parts it can hold.
            let part = state.cache.batch_limit(li).unwrap_or(n).max(1);
            for t0 in (0..n).step_by(part) {
                let t1 = (t0 + part).min(n);
                for t in t0..t1 {
                    state.cache.push(
                        li,
                        &k[t * kv_row..(t + 1) * kv_row],
                        &v[t * kv_row..(t + 1) * kv_row],
                    );
                }
                let kv = state.cache.layer(li);
                attn[t0 * q_row..t1 * q_row]
                    .par_chunks_mut(q_row)
                    .enumerate()
                    .for_each(|(i, out)| {
                        let t = t0 + i;
                        attend(
                            self.config.cpu,
                            s,
                            &q[t * q_row..(t + 1) * q_row],
                            &kv,
                            pos + t + 1,
                            layer.window,
                            out,
                            false,
                        )
                    });
            }
            see(li, Site::AttnOut, &attn);
            let mut o = layer.o_proj.forward_batch(&attn, n);
            norm_rows_in_place(&mut o, layer.attn_out_norm.as_deref(), eps);
            add_rows(&mut x, &o);

            let xn = norm_rows(&x, &layer.mlp_norm);
            see(li, Site::MlpIn, &xn);
            let gate = self.gate_up_batch(layer, &xn, n);
            see(li, Site::MlpDown, &gate);
            let mut down = layer.down_proj.forward_batch(&gate, n);
            norm_rows_in_place(&mut down, layer.mlp_out_norm.as_deref(), eps);
            add_rows(&mut x, &down);
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        if observing {
            see(self.layers.len(), Site::Head, &norm_rows(&x, &self.norm));
        }
        Ok(match want {
            Logits::None => Vec::new(),
            Logits::Last => {
                rms_norm(&x[(n - 1) * h..], &self.norm, eps, &mut state.xn);
                head.matvec(&state.xn, &mut state.logits);
                self.softcap(&mut state.logits);
                state.logits.clone()
            }
            Logits::All => {
                let xn = norm_rows(&x, &self.norm);
                let mut out = vec![0.0; n * s.vocab_size];
                head.matmul(&xn, n, &mut out);
                self.softcap(&mut out);
                out
            }
        })
    }

    /// One token for each of several independent sequences (batched decoding): `tokens[b]` runs
    /// at the next position of `states[b]`. Every weight row is decoded once for the whole
    /// batch, as in prefill; attention reads each sequence's own cache. Returns
    /// `states.len() × vocab` logits. Same math as [`Model::step`] per sequence, up to the
    /// summation order of the batched kernels.
    pub fn step_many(&self, states: &mut [&mut State], tokens: &[u32]) -> Result<Vec<f32>, Error> {
        let s = &self.spec;
        let (n, d) = (tokens.len(), s.head_dim);
        if states.len() != n || n == 0 {
            return Err(Error::Invalid(format!(
                "step_many: {} states for {n} tokens",
                states.len()
            )));
        }
        for st in states.iter() {
            check_room(&st.cache, 1)?;
        }
        self.check_tokens(tokens)?;
        let eps = s.rms_norm_eps as f32;
        let positions: Vec<usize> = states.iter().map(|st| st.cache.len()).collect();
        let mut x = self.embed(tokens);
        let norm_rows = |x: &[f32], w: &[f32]| norm_rows(x, w, eps);
        let (q_row, kv_row) = (s.num_heads * d, s.num_kv_heads * d);
        for (li, layer) in self.layers.iter().enumerate() {
            let xn = norm_rows(&x, &layer.input_norm);
            let [mut q, mut k, v] = layer.qkv_batch(&xn, n);
            self.rotate_rows(layer, &mut q, &mut k, |b| positions[b]);
            for (b, st) in states.iter_mut().enumerate() {
                st.cache.push(
                    li,
                    &k[b * kv_row..(b + 1) * kv_row],
                    &v[b * kv_row..(b + 1) * kv_row],
                );
            }
            // One sequence per task on the worker pool (the pool the mat-vecs use: mixing in
            // rayon here would leave its workers competing with the pool's spinning ones).
            let mut attn = vec![0.0f32; n * q_row];
            {
                let work: Vec<std::sync::Mutex<(&mut [f32], &mut State)>> = attn
                    .chunks_mut(q_row)
                    .zip(states.iter_mut())
                    .map(|(o, st)| std::sync::Mutex::new((o, &mut **st)))
                    .collect();
                crate::kernels::pool::global().run(work.len(), &|b| {
                    let mut g = work[b].lock().unwrap_or_else(|e| e.into_inner());
                    let (out, st) = &mut *g;
                    attend(
                        self.config.cpu,
                        s,
                        &q[b * q_row..(b + 1) * q_row],
                        &st.cache.layer(li),
                        positions[b] + 1,
                        layer.window,
                        out,
                        false,
                    )
                });
            }
            let mut o = layer.o_proj.forward_batch(&attn, n);
            norm_rows_in_place(&mut o, layer.attn_out_norm.as_deref(), eps);
            add_rows(&mut x, &o);
            let xn = norm_rows(&x, &layer.mlp_norm);
            let gate = self.gate_up_batch(layer, &xn, n);
            let mut down = layer.down_proj.forward_batch(&gate, n);
            norm_rows_in_place(&mut down, layer.mlp_out_norm.as_deref(), eps);
            add_rows(&mut x, &down);
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        let xn = norm_rows(&x, &self.norm);
        let mut out = vec![0.0; n * s.vocab_size];
        head.matmul(&xn, n, &mut out);
        self.softcap(&mut out);
        Ok(out)
    }

    /// Causal attention of the current query over `n` cached positions; each query head reads
    /// the KV head its group shares (GQA).
    fn attention(&self, state: &mut State, layer: usize, n: usize) {
        let kv = state.cache.layer(layer);
        let window = self.layers[layer].window;
        attend(
            self.config.cpu,
            &self.spec,
            &state.q,
            &kv,
            n,
            window,
            &mut state.attn,
            true,
        );
    }

    /// The RoPE a layer rotates with.
    fn rope_of(&self, layer: &Layer) -> &Rope {
        match (layer.window, &self.rope_local) {
            (Some(_), Some(local)) => local,
            _ => &self.rope,
        }
    }

    /// Gemma multiplies embeddings by sqrt(hidden_size) (in f32, as llama.cpp does).
    fn scale_embedding(&self, x: &mut [f32]) {
        if self.spec.scale_embeddings {
            let scale = (self.spec.hidden_size as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= scale);
        }
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
            Activation::Silu => silu_mul(self.config.cpu, gate, up),
            Activation::GeluTanh => gelu_tanh_mul(gate, up),
        }
    }

    /// `act(gate) · up` of `n` normed rows: down_proj's input.
    fn gate_up_batch(&self, layer: &Layer, xn: &[f32], n: usize) -> Vec<f32> {
        let [mut gate, up] = Linear::forward_batch_group([&layer.gate_proj, &layer.up_proj], xn, n);
        gate.par_chunks_mut(ELEMS_PER_TASK)
            .zip(up.par_chunks(ELEMS_PER_TASK))
            .with_min_len(rows_per_task(ELEMS_PER_TASK))
            .for_each(|(g, u)| self.gate_act(g, u));
        gate
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

impl Model {
    /// Per token (in parallel): Qwen3's q/k norm, then RoPE at `pos(t)`.
    fn rotate_rows(
        &self,
        layer: &Layer,
        q: &mut [f32],
        k: &mut [f32],
        pos: impl Fn(usize) -> usize + Sync,
    ) {
        let s = &self.spec;
        let (d, eps) = (s.head_dim, s.rms_norm_eps as f32);
        q.par_chunks_mut(s.num_heads * d)
            .zip(k.par_chunks_mut(s.num_kv_heads * d))
            .enumerate()
            .with_min_len(rows_per_task(s.num_heads * d))
            .for_each(|(t, (qt, kt))| {
                layer.qk_norm(qt, kt, d, eps);
                self.rope_of(layer).apply_pair(qt, kt, d, pos(t));
            });
    }
}

impl Layer {
    /// q, k and v of `n` normed rows, in one pass.
    fn qkv_batch(&self, xn: &[f32], n: usize) -> [Vec<f32>; 3] {
        Linear::forward_batch_group([&self.q_proj, &self.k_proj, &self.v_proj], xn, n)
    }

    /// Qwen3's and Gemma's per-head RMSNorm of queries and keys (no-op for the others).
    fn qk_norm(&self, q: &mut [f32], k: &mut [f32], head_dim: usize, eps: f32) {
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q.chunks_exact_mut(head_dim)
                .for_each(|h| rms_norm_in_place(h, qn, eps));
            k.chunks_exact_mut(head_dim)
                .for_each(|h| rms_norm_in_place(h, kn, eps));
        }
    }
}

/// A batch's activations (megabytes per layer, allocated and freed layer after layer) come from
/// glibc's heap and are reused, instead of each being a fresh `mmap` whose pages fault in and
/// are zeroed again (measured: 8–10 % of prefill). glibc serves blocks above its mmap threshold
/// (128 KiB) with `mmap` until one such block is freed, and then raises the threshold to that
/// block's size if it is at most 32 MiB: so one untouched 31 MiB block (with its header still
/// under the limit) is allocated and freed. Other allocators ignore this; nothing is touched.
fn keep_large_buffers_on_the_heap() {
    drop(std::hint::black_box(Vec::<u8>::with_capacity(31 << 20)));
}

fn check_room(cache: &KvCache, n: usize) -> Result<(), Error> {
    if cache.len() + n > cache.capacity() {
        return Err(Error::Invalid(format!(
            "context is full ({} positions)",
            cache.capacity()
        )));
    }
    Ok(())
}

/// Values per rayon task, at the least, in a batch's element-wise steps (norms, RoPE, residual
/// adds, SiLU, biases). Smaller batches (decoding a few sequences at once) stay on the calling
/// thread: rayon, called from outside its pool, would cost a wake-up per step, and its workers
/// would compete with the worker pool's spinning ones.
const PAR_MIN: usize = 1 << 15;
/// Values per rayon task in the flat element-wise steps.
const ELEMS_PER_TASK: usize = 1 << 14;

/// Rows of `len` values per rayon task.
fn rows_per_task(len: usize) -> usize {
    (PAR_MIN / len.max(1)).max(1)
}

/// RMSNorm of every `w.len()`-long row of `x`, rows in parallel.
fn norm_rows(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    out.par_chunks_exact_mut(w.len())
        .zip(x.par_chunks_exact(w.len()))
        .with_min_len(rows_per_task(w.len()))
        .for_each(|(o, r)| rms_norm(r, w, eps, o));
    out
}

/// RMSNorm in place of every row of `x` when there is a norm `w` (Gemma's output norms).
fn norm_rows_in_place(x: &mut [f32], w: Option<&[f32]>, eps: f32) {
    if let Some(w) = w {
        x.par_chunks_exact_mut(w.len())
            .with_min_len(rows_per_task(w.len()))
            .for_each(|r| rms_norm_in_place(r, w, eps));
    }
}

/// `x += y` over a batch, in parallel.
fn add_rows(x: &mut [f32], y: &[f32]) {
    x.par_chunks_mut(ELEMS_PER_TASK)
        .zip(y.par_chunks(ELEMS_PER_TASK))
        .with_min_len(rows_per_task(ELEMS_PER_TASK))
        .for_each(|(a, b)| add_in_place(a, b));
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
    gate: Vec<f32>,
    up: Vec<f32>,
    logits: Vec<f32>,
}
