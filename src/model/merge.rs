//! Merging adapters into a base at export (`pocket export BASE --lora PATH -o OUT`): each
//! adapted weight gets `W' = W + s·B·A` in f32 before it is quantized, computed one tensor at a
//! time from the adapters as the engine attached them (so a GGUF base's q/k rows are already in
//! HF order).

use super::Model;
use crate::lora::{AdapterSet, LowRank, Target};
use crate::Error;
use pocket_formats::convert::Edits;

/// The deltas of an adapter set on a base, for the export writers.
pub struct Merge<'a> {
    model: &'a Model,
    set: &'a AdapterSet,
}

impl<'a> Merge<'a> {
    /// Refuses what cannot be merged: a head adapter on a base whose head is its embedding.
    pub fn new(model: &'a Model, set: &'a AdapterSet) -> Result<Merge<'a>, Error> {
        let tied = model.lm_head.is_none();
        for (a, s) in &set.adapters {
            if *s != 0.0 && tied && (a.head.is_some() || a.new_head.is_some()) {
                return Err(Error::Invalid(format!(
                    "{}: adapts the output head, which this base ties to its embedding: merged, \
                     it would change the embedding too (run it unmerged with --lora instead)",
                    a.path.display()
                )));
            }
        }
        Ok(Merge { model, set })
    }

    /// `scale · Bᵀᵀ·A` as an `[rows, cols]` matrix, added to `out`.
    fn add_product(lr: &LowRank, scale: f32, out: &mut [f32]) {
        let (r, rows, cols) = (lr.rank, lr.rows, lr.cols);
        let (a, bt) = (lr.a.to_f32(), lr.bt.to_f32());
        for o in 0..rows {
            let row = &mut out[o * cols..(o + 1) * cols];
            for j in 0..r {
                let c = scale * bt[j * rows + o];
                if c != 0.0 {
                    let a = &a[j * cols..(j + 1) * cols];
                    row.iter_mut().zip(a).for_each(|(y, x)| *y += c * x);
                }
            }
        }
    }

    fn layer_target(&self, name: &str) -> Option<(usize, Target)> {
        let rest = name.strip_prefix("model.layers.")?;
        let (l, rest) = rest.split_once('.')?;
        let l: usize = l.parse().ok()?;
        let t = Target::ALL
            .into_iter()
            .find(|t| rest == format!("{}.weight", t.module()))?;
        (l < self.model.layers.len()).then_some((l, t))
    }
}

impl Edits for Merge<'_> {
    fn contains_key(&self, name: &str) -> bool {
        self.set.adapters.iter().any(|(a, s)| {
            *s != 0.0
                && match name {
                    "model.embed_tokens.weight" => a.embed.is_some(),
                    "lm_head.weight" => a.head.is_some() || a.new_head.is_some(),
                    _ => self
                        .layer_target(name)
                        .is_some_and(|(l, t)| a.layers[l][t as usize].is_some()),
                }
        })
    }

    fn delta(&self, name: &str) -> Option<Vec<f32>> {
        if !self.contains_key(name) {
            return None;
        }
        let spec = &self.model.spec;
        let mut out: Vec<f32>;
        match name {
            "model.embed_tokens.weight" => {
                let (v, h) = (spec.vocab_size, spec.hidden_size);
                out = vec![0.0; v * h];
                for (a, s) in &self.set.adapters {
                    let Some(lr) = a.embed.as_ref().filter(|_| *s != 0.0) else {
                        continue;
                    };
                    let (fa, fb) = (lr.a.to_f32(), lr.bt.to_f32());
                    for t in 0..v {
                        for j in 0..lr.rank {
                            let c = s * lr.scale * fa[t * lr.rank + j];
                            let b = &fb[j * h..(j + 1) * h];
                            out[t * h..(t + 1) * h]
                                .iter_mut()
                                .zip(b)
                                .for_each(|(y, x)| *y += c * x);
                        }
                    }
                }
            }
            "lm_head.weight" => {
                let (v, h) = (spec.vocab_size, spec.hidden_size);
                out = vec![0.0; v * h];
                for (a, s) in &self.set.adapters {
                    if *s == 0.0 {
                        continue;
                    }
                    if let (Some(new), Some(base)) = (&a.new_head, &self.model.lm_head) {
                        // A new head replaces the base's: its delta is the difference.
                        let (mut n, mut b) = (vec![0.0; h], vec![0.0; h]);
                        for r in 0..v {
                            new.row(r, &mut n);
                            base.row(r, &mut b);
                            for (i, y) in out[r * h..(r + 1) * h].iter_mut().enumerate() {
                                *y += n[i] - b[i];
                            }
                        }
                    }
                    if let Some(lr) = &a.head {
                        Merge::add_product(lr, s * lr.scale, &mut out);
                    }
                }
            }
            _ => {
                let (l, t) = self.layer_target(name)?;
                let w = &self.model.layers[l].linears()[t as usize].weight;
                out = vec![0.0; w.rows * w.cols];
                for (a, s) in &self.set.adapters {
                    if let (Some(lr), true) = (&a.layers[l][t as usize], *s != 0.0) {
                        Merge::add_product(lr, s * lr.scale, &mut out);
                    }
                }
            }
        }
        Some(out)
    }
}
