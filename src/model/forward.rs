//! The layer loop: one forward pass over `n` rows serves decoding (one row), prompt prefill
//! and perplexity (many rows of one sequence) and batched decoding (one row for each of many
//! sequences). Each sequence is a [`State`]; its rows run at its next positions, in order.
//! Read beside transformers' `Qwen2DecoderLayer` / `Gemma3DecoderLayer.forward`.

use super::adapt::{add_head, runs_of, Adapted};
use super::linear::{Linear, Observer, Site};
use super::probe::Entry;
use super::rows::{
    add_rows, norm_rows, norm_rows_in_place, on_pool, pool_rows, rows_per_task, ELEMS_PER_TASK,
};
use super::{Layer, Logits, Model, Picked, State};
use crate::attention::{attend, Split};
use crate::kernels::norm::rms_norm;
use crate::lora::Target;
use crate::Error;
use rayon::prelude::*;
use std::ops::Range;

/// How a pass over several rows rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rounding {
    /// The batched kernels' and one-span attention's own rounding (prefill, perplexity,
    /// batched decoding).
    Batch,
    /// Each row as a one-row step would round it ([`Model::verify`]).
    Steps,
}

impl Model {
    /// Runs `tokens` through the model: sequence `b` (`states[b]`) takes the next `lens[b]`
    /// tokens, at its next positions. With [`Logits::Last`], the last row's logits are left in
    /// the last state (see [`State`]) and nothing is returned; with [`Logits::All`], every
    /// row's (`n × vocab`). `obs` sees every linear layer's input rows.
    ///
    /// One row takes the mat-vec kernels and splits its attention over the worker pool; more
    /// rows take the batched kernels and attend one row per task. Every weight row is read
    /// once per pass, however many rows there are.
    pub fn forward(
        &self,
        states: &mut [&mut State],
        tokens: &[u32],
        lens: &[usize],
        want: Logits,
        obs: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>, Error> {
        self.forward_as(
            states,
            tokens,
            lens,
            want,
            obs,
            Rounding::Batch,
            Entry::Embed,
        )
    }

    /// [`Model::forward`], rounding as `rounding` says, its layer loop entered as `entry` says.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_as(
        &self,
        states: &mut [&mut State],
        tokens: &[u32],
        lens: &[usize],
        want: Logits,
        obs: Option<&mut dyn Observer>,
        rounding: Rounding,
        entry: Entry<'_>,
    ) -> Result<Vec<f32>, Error> {
        let steps = rounding == Rounding::Steps;
        let (s, n, h) = (&self.spec, tokens.len(), self.spec.hidden_size);
        let eps = s.rms_norm_eps as f32;
        let x = self.run_layers(states, tokens, lens, obs, rounding, entry)?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        Ok(match want {
            Logits::None => Vec::new(),
            Logits::Last => {
                let st = states.last_mut().expect("checked: not empty");
                rms_norm(
                    self.config.cpu,
                    &x[(n - 1) * h..],
                    &self.norm,
                    eps,
                    &mut st.xn,
                );
                let set = st.lora.clone().filter(|l| !l.is_empty());
                self.head_for(set.as_deref()).matvec(&st.xn, &mut st.logits);
                if let Some(set) = set {
                    add_head(self.config.cpu, &set, &st.xn, 1, &mut st.logits);
                }
                self.softcap(&mut st.logits);
                Vec::new()
            }
            Logits::All => {
                let xn = norm_rows(self.config.cpu, &x, &self.norm, eps);
                let mut out = vec![0.0; n * s.vocab_size];
                match n {
                    1 => head.matvec(&xn, &mut out),
                    _ if steps => head.matmul_as_matvec(&xn, n, &mut out),
                    _ => head.matmul(&xn, n, &mut out),
                }
                let runs = runs_of(lens);
                if let Some(a) = Adapted::of(states, &runs) {
                    let v = s.vocab_size;
                    for r in 0..n {
                        if let Some(set) = a.set_of(r) {
                            let (x, y) = (&xn[r * h..(r + 1) * h], &mut out[r * v..(r + 1) * v]);
                            if let Some(m) = set.new_head() {
                                m.matvec(x, y);
                            }
                            add_head(self.config.cpu, set, x, 1, y);
                        }
                    }
                }
                self.softcap(&mut out);
                out
            }
        })
    }

    /// [`Model::forward`] that returns, for the rows `picked` (indices into `tokens`), their
    /// final-normed hidden states (the head's input, `picked.len() × hidden`) and, when
    /// `logits`, their logits (`picked.len() × vocab`): what a decision reads, without the
    /// head's cost for the rows it does not read. One picked row's logits are computed as a
    /// decode step's last row is (the mat-vec kernel), so they equal [`Logits::Last`]'s.
    pub fn forward_picked(
        &self,
        states: &mut [&mut State],
        tokens: &[u32],
        lens: &[usize],
        picked: &[usize],
        logits: bool,
    ) -> Result<Picked, Error> {
        let (s, n, h) = (&self.spec, tokens.len(), self.spec.hidden_size);
        if let Some(&r) = picked.iter().find(|&&r| r >= n) {
            return Err(Error::Invalid(format!(
                "forward_picked: row {r} of a pass of {n}"
            )));
        }
        let x = self.run_layers(states, tokens, lens, None, Rounding::Batch, Entry::Embed)?;
        let rows: Vec<f32> = picked
            .iter()
            .flat_map(|&r| x[r * h..(r + 1) * h].iter().copied())
            .collect();
        let eps = s.rms_norm_eps as f32;
        let hidden = match picked.len() {
            0 => Vec::new(),
            1 => {
                let mut o = vec![0.0; h];
                rms_norm(self.config.cpu, &rows, &self.norm, eps, &mut o);
                o
            }
            _ => norm_rows(self.config.cpu, &rows, &self.norm, eps),
        };
        let mut out = Vec::new();
        if logits && !picked.is_empty() {
            let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
            out = vec![0.0; picked.len() * s.vocab_size];
            match picked.len() {
                1 => head.matvec(&hidden, &mut out),
                m => head.matmul(&hidden, m, &mut out),
            }
            if let Some(a) = Adapted::of(states, &runs_of(lens)) {
                let v = s.vocab_size;
                for (i, &r) in picked.iter().enumerate() {
                    if let Some(set) = a.set_of(r) {
                        let (x, y) = (&hidden[i * h..(i + 1) * h], &mut out[i * v..(i + 1) * v]);
                        if let Some(m) = set.new_head() {
                            m.matvec(x, y);
                        }
                        add_head(self.config.cpu, set, x, 1, y);
                    }
                }
            }
            self.softcap(&mut out);
        }
        Ok(Picked {
            hidden,
            logits: out,
        })
    }

    /// The layer loop of a pass: the residual stream after the last layer (`n × hidden`, before
    /// the final norm), every row's keys and values pushed into its sequence's cache (from the
    /// layer `entry` starts at).
    fn run_layers(
        &self,
        states: &mut [&mut State],
        tokens: &[u32],
        lens: &[usize],
        mut obs: Option<&mut dyn Observer>,
        rounding: Rounding,
        entry: Entry<'_>,
    ) -> Result<Vec<f32>, Error> {
        let steps = rounding == Rounding::Steps;
        let s = &self.spec;
        let (n, h) = (tokens.len(), s.hidden_size);
        if states.is_empty() || lens.len() != states.len() || lens.iter().sum::<usize>() != n {
            return Err(Error::Invalid(format!(
                "forward: {} states, {} row counts, {n} tokens",
                states.len(),
                lens.len()
            )));
        }
        if lens.contains(&0) {
            return Err(Error::Invalid("forward: a sequence with no tokens".into()));
        }
        for (st, &len) in states.iter().zip(lens) {
            st.check_room(len)?;
        }
        self.check_tokens(tokens)?;
        let eps = s.rms_norm_eps as f32;
        // Row → (sequence, position).
        let mut runs: Vec<Range<usize>> = Vec::with_capacity(lens.len());
        let mut pos = Vec::with_capacity(n);
        for (st, &len) in states.iter().zip(lens) {
            let first = runs.last().map_or(0, |r| r.end);
            runs.push(first..first + len);
            pos.extend((0..len).map(|t| st.cache.len() + t));
        }
        let observing = obs.is_some();
        let mut see = |layer: usize, site: Site, rows: &[f32]| {
            if let Some(o) = obs.as_deref_mut() {
                o.observe(layer, site, rows);
            }
        };

        let cpu = self.config.cpu;
        let adapted = Adapted::of(states, &runs);
        let (first, mut x, mut keep) = match entry {
            Entry::At(layer, x) => (layer, self.entering(layer, x, n)?, None),
            Entry::Embed | Entry::Record(_) => {
                let mut x = self.embed(tokens);
                if let Some(a) = &adapted {
                    a.embed(cpu, tokens, &mut x, h, self.embedding_scale());
                }
                (0, x, entry.into_record())
            }
        };
        for (li, layer) in self.layers.iter().enumerate().skip(first) {
            if let Some(k) = keep.as_deref_mut() {
                k.push(x.clone());
            }
            // Attention block.
            let xn = norm_rows(self.config.cpu, &x, &layer.input_norm, eps);
            see(li, Site::AttnIn, &xn);
            let qkv = [
                (&layer.q_proj, Target::Q),
                (&layer.k_proj, Target::K),
                (&layer.v_proj, Target::V),
            ];
            let [mut q, mut k, v] = adapted_rows(adapted.as_ref(), cpu, li, qkv, &xn, n, steps);
            let attn = if steps && n > 1 && runs.iter().all(|r| r.len() == 1) {
                self.attend_steps(li, layer, states, &pos, &mut q, &mut k, &v)
            } else {
                self.rotate_rows(layer, &mut q, &mut k, &pos);
                self.attend_rows(li, layer, states, &runs, &pos, &q, &k, &v, steps)
            };
            see(li, Site::AttnOut, &attn);
            let o_proj = [(&layer.o_proj, Target::O)];
            let [mut o] = adapted_rows(adapted.as_ref(), cpu, li, o_proj, &attn, n, steps);
            norm_rows_in_place(self.config.cpu, &mut o, layer.attn_out_norm.as_deref(), eps);
            add_rows(&mut x, &o, h);

            // MLP block (gated: SwiGLU, or GELU for Gemma).
            let xn = norm_rows(self.config.cpu, &x, &layer.mlp_norm, eps);
            see(li, Site::MlpIn, &xn);
            let gate = self.gate_up(layer, &xn, n, steps, adapted.as_ref().map(|a| (a, li)));
            see(li, Site::MlpDown, &gate);
            let down_proj = [(&layer.down_proj, Target::Down)];
            let [mut down] = adapted_rows(adapted.as_ref(), cpu, li, down_proj, &gate, n, steps);
            norm_rows_in_place(
                self.config.cpu,
                &mut down,
                layer.mlp_out_norm.as_deref(),
                eps,
            );
            add_rows(&mut x, &down, h);
        }
        if let Some(k) = keep {
            k.push(x.clone());
        }
        if observing {
            see(
                self.layers.len(),
                Site::Head,
                &norm_rows(self.config.cpu, &x, &self.norm, eps),
            );
        }
        Ok(x)
    }

    /// Runs one token at the next position of `state`. Returns the logits when `want_logits`
    /// (prefill skips the head for all but the last prompt token).
    pub fn step<'s>(
        &self,
        state: &'s mut State,
        token: u32,
        want_logits: bool,
    ) -> Result<Option<&'s [f32]>, Error> {
        let want = if want_logits {
            Logits::Last
        } else {
            Logits::None
        };
        self.forward(&mut [&mut *state], &[token], &[1], want, None)?;
        Ok(want_logits.then_some(&state.logits[..]))
    }

    /// Runs `tokens` at the next positions of `state` as one pass (prompt prefill,
    /// perplexity). Returns `n × vocab` logits for `Logits::All`, `vocab` for `Logits::Last`.
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
        obs: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>, Error> {
        let out = self.forward(&mut [&mut *state], tokens, &[tokens.len()], want, obs)?;
        Ok(match want {
            Logits::Last => state.logits.clone(),
            _ => out,
        })
    }

    /// Runs `tokens` at the next positions of `state` as one pass, each row's logits equal bit
    /// for bit to what [`Model::step`] would give that token after the ones before it: the
    /// check of speculated tokens, whose output must equal plain decoding's. Returns
    /// `tokens.len() × vocab` logits. Every weight row is read once for all of them (up to 16
    /// rows; more take one mat-vec per row).
    pub fn verify(&self, state: &mut State, tokens: &[u32]) -> Result<Vec<f32>, Error> {
        let n = tokens.len();
        self.forward_as(
            &mut [&mut *state],
            tokens,
            &[n],
            Logits::All,
            None,
            Rounding::Steps,
            Entry::Embed,
        )
    }

    /// One token for each of several independent sequences (batched decoding): `tokens[b]` runs
    /// at the next position of `states[b]`. Returns `states.len() × vocab` logits.
    pub fn step_many(&self, states: &mut [&mut State], tokens: &[u32]) -> Result<Vec<f32>, Error> {
        if states.len() != tokens.len() || tokens.is_empty() {
            return Err(Error::Invalid(format!(
                "step_many: {} states for {} tokens",
                states.len(),
                tokens.len()
            )));
        }
        let lens = vec![1; tokens.len()];
        self.forward(states, tokens, &lens, Logits::All, None)
    }

    /// [`Model::step_many`] where each row's logits are bit for bit what [`Model::step`] gives
    /// that sequence alone: a server's answers then do not depend on which other requests
    /// share their decode steps. Up to 16 rows read each weight row once (the verification
    /// path's small-batch kernels); more take one mat-vec per row, so callers batch by 16.
    pub fn step_each(&self, states: &mut [&mut State], tokens: &[u32]) -> Result<Vec<f32>, Error> {
        if states.len() != tokens.len() || tokens.is_empty() {
            return Err(Error::Invalid(format!(
                "step_each: {} states for {} tokens",
                states.len(),
                tokens.len()
            )));
        }
        let lens = vec![1; tokens.len()];
        self.forward_as(
            states,
            tokens,
            &lens,
            Logits::All,
            None,
            Rounding::Steps,
            Entry::Embed,
        )
    }

    /// Pushes each row's key and value into its sequence's cache and attends its query over
    /// that sequence's positions so far. A ring (sliding-window layer) takes a sequence's rows
    /// in parts it can hold: each part is pushed, then its rows attend.
    #[allow(clippy::too_many_arguments)]
    fn attend_rows(
        &self,
        li: usize,
        layer: &Layer,
        states: &mut [&mut State],
        runs: &[Range<usize>],
        pos: &[usize],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        steps: bool,
    ) -> Vec<f32> {
        let s = &self.spec;
        let cpu = self.config.cpu;
        let (q_row, kv_row) = (s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim);
        let n = pos.len();
        let mut attn = vec![0.0f32; n * q_row];
        if n == 1 {
            let st = &mut states[0];
            st.cache.push(li, k, v);
            let kv = st.cache.layer(li);
            attend(
                cpu,
                s,
                q,
                &kv,
                pos[0] + 1,
                layer.window,
                &mut attn,
                Split::Pool,
            );
            return attn;
        }
        let parts: Vec<usize> = states
            .iter()
            .zip(runs)
            .map(|(st, r)| st.cache.batch_limit(li).unwrap_or(r.len()).max(1))
            .collect();
        let rounds = runs
            .iter()
            .zip(&parts)
            .map(|(r, &p)| r.len().div_ceil(p))
            .max()
            .unwrap_or(0);
        for round in 0..rounds {
            let mut todo: Vec<(usize, usize)> = Vec::new();
            for (b, st) in states.iter_mut().enumerate() {
                let lo = (runs[b].start + round * parts[b]).min(runs[b].end);
                let hi = (lo + parts[b]).min(runs[b].end);
                for t in lo..hi {
                    let r = t * kv_row..(t + 1) * kv_row;
                    st.cache.push(li, &k[r.clone()], &v[r]);
                    todo.push((b, t));
                }
            }
            let kvs: Vec<_> = states.iter().map(|st| st.cache.layer(li)).collect();
            let mut outs: Vec<Option<&mut [f32]>> = attn.chunks_mut(q_row).map(Some).collect();
            let work: Vec<(usize, usize, &mut [f32])> = todo
                .iter()
                .map(|&(b, t)| (b, t, outs[t].take().expect("each row once")))
                .collect();
            let split = if steps { Split::Inline } else { Split::Whole };
            let one = |(b, t, out): (usize, usize, &mut [f32])| {
                let qt = &q[t * q_row..(t + 1) * q_row];
                attend(cpu, s, qt, &kvs[b], pos[t] + 1, layer.window, out, split)
            };
            if states.len() == 1 && !steps {
                work.into_par_iter().for_each(one);
            } else {
                // A verification pass's few rows take the pool too: rayon, called from outside
                // its own threads, would cost a wake-up per layer.
                // One row per task on the worker pool (the pool the mat-vecs use: mixing in
                // rayon here would leave its workers competing with the pool's spinning ones).
                let work: Vec<std::sync::Mutex<Option<(usize, usize, &mut [f32])>>> = work
                    .into_iter()
                    .map(|w| std::sync::Mutex::new(Some(w)))
                    .collect();
                crate::pool::global().run(work.len(), &|i| {
                    let mut g = work[i].lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(w) = g.take() {
                        one(w);
                    }
                });
            }
        }
        attn
    }

    /// A batched decode step's attention (one row per sequence, each rounding as its own
    /// step would): each row's q/k norm, RoPE, cache push and attention in one task on the
    /// worker pool. Done row by row on the calling thread, the pushes (f16 conversion into
    /// the tiled key layout) and RoPE left the pool's other workers waiting.
    #[allow(clippy::too_many_arguments)]
    fn attend_steps(
        &self,
        li: usize,
        layer: &Layer,
        states: &mut [&mut State],
        pos: &[usize],
        q: &mut [f32],
        k: &mut [f32],
        v: &[f32],
    ) -> Vec<f32> {
        let s = &self.spec;
        let (d, eps, cpu) = (s.head_dim, s.rms_norm_eps as f32, self.config.cpu);
        let (q_row, kv_row) = (s.num_heads * d, s.num_kv_heads * d);
        let mut attn = vec![0.0f32; pos.len() * q_row];
        type Row<'a, 'b> = (
            &'a mut &'b mut State,
            &'a mut [f32],
            &'a mut [f32],
            &'a mut [f32],
        );
        let rows: Vec<std::sync::Mutex<Row>> = states
            .iter_mut()
            .zip(q.chunks_exact_mut(q_row))
            .zip(k.chunks_exact_mut(kv_row))
            .zip(attn.chunks_exact_mut(q_row))
            .map(|(((st, qt), kt), out)| std::sync::Mutex::new((st, qt, kt, out)))
            .collect();
        crate::pool::global().run(rows.len(), &|b| {
            let mut row = rows[b].lock().unwrap_or_else(|e| e.into_inner());
            let (st, qt, kt, out) = &mut *row;
            layer.qk_norm(cpu, qt, kt, d, eps);
            self.rope_of(layer).apply_pair(qt, kt, d, pos[b]);
            st.cache.push(li, kt, &v[b * kv_row..(b + 1) * kv_row]);
            let kv = st.cache.layer(li);
            attend(
                cpu,
                s,
                qt,
                &kv,
                pos[b] + 1,
                layer.window,
                out,
                Split::Inline,
            );
        });
        drop(rows);
        attn
    }

    /// Per row (in parallel): Qwen3's and Gemma's q/k norm, then RoPE at the row's position.
    fn rotate_rows(&self, layer: &Layer, q: &mut [f32], k: &mut [f32], pos: &[usize]) {
        let s = &self.spec;
        let (d, eps, cpu) = (s.head_dim, s.rms_norm_eps as f32, self.config.cpu);
        q.par_chunks_mut(s.num_heads * d)
            .zip(k.par_chunks_mut(s.num_kv_heads * d))
            .enumerate()
            .with_min_len(rows_per_task(s.num_heads * d))
            .for_each(|(t, (qt, kt))| {
                layer.qk_norm(cpu, qt, kt, d, eps);
                self.rope_of(layer).apply_pair(qt, kt, d, pos[t]);
            });
    }

    /// `act(gate) · up` of `n` normed rows: down_proj's input.
    fn gate_up(
        &self,
        layer: &Layer,
        xn: &[f32],
        n: usize,
        steps: bool,
        adapted: Option<(&Adapted, usize)>,
    ) -> Vec<f32> {
        let gu = [
            (&layer.gate_proj, Target::Gate),
            (&layer.up_proj, Target::Up),
        ];
        let (cpu, li) = (self.config.cpu, adapted.map_or(0, |(_, li)| li));
        let [mut gate, up] = adapted_rows(adapted.map(|(a, _)| a), cpu, li, gu, xn, n, steps);
        if on_pool(n) {
            let f = layer.gate_proj.weight.rows;
            pool_rows(&mut gate, f, |i, g| {
                self.gate_act(g, &up[i * f..(i + 1) * f])
            });
            return gate;
        }
        gate.par_chunks_mut(ELEMS_PER_TASK)
            .zip(up.par_chunks(ELEMS_PER_TASK))
            .with_min_len(rows_per_task(ELEMS_PER_TASK))
            .for_each(|(g, u)| self.gate_act(g, u));
        gate
    }
}

/// `Linear::forward_rows` over `ls`, with the pass's adapters for layer `li` when it has any.
fn adapted_rows<const N: usize>(
    adapted: Option<&Adapted>,
    cpu: crate::kernels::Cpu,
    li: usize,
    ls: [(&Linear, Target); N],
    x: &[f32],
    n: usize,
    steps: bool,
) -> [Vec<f32>; N] {
    match adapted {
        Some(a) => a.forward(cpu, li, ls, x, n, steps),
        None => Linear::forward_rows(ls.map(|(l, _)| l), x, n, steps),
    }
}
