//! LoRA adapters in the forward pass (`crate::lora`): each sequence's adapters added to its own
//! rows of a linear layer's output, its embedding rows and its logits, beside the base's
//! kernels. A pass where no sequence has an adapter runs exactly as it does without LoRA.

use super::State;
use crate::kernels::lora::{add_low_rank, axpy, dot};
use crate::kernels::Cpu;
use crate::lora::{AdapterSet, LowRank, Target};
use std::ops::Range;
use std::sync::Arc;

/// The sequences of a pass that run adapters, with their rows.
pub(super) struct Adapted {
    sets: Vec<(Arc<AdapterSet>, Range<usize>)>,
}

/// Each sequence's rows in a pass of `lens` rows per sequence.
pub(super) fn runs_of(lens: &[usize]) -> Vec<Range<usize>> {
    let mut at = 0;
    lens.iter()
        .map(|&l| {
            at += l;
            at - l..at
        })
        .collect()
}

impl Adapted {
    /// `None` when no sequence has an adapter with a non-zero scale.
    pub(super) fn of(states: &[&mut State], runs: &[Range<usize>]) -> Option<Adapted> {
        let sets: Vec<(Arc<AdapterSet>, Range<usize>)> = states
            .iter()
            .zip(runs)
            .filter_map(|(s, r)| {
                s.lora
                    .as_ref()
                    .filter(|l| !l.is_empty())
                    .map(|l| (l.clone(), r.clone()))
            })
            .collect();
        (!sets.is_empty()).then_some(Adapted { sets })
    }

    /// `y` (`n × out`) += each sequence's adapters' products for layer `li`'s `t`, over its
    /// rows of `x` (`n × in`).
    pub(super) fn linear(
        &self,
        cpu: Cpu,
        li: usize,
        t: Target,
        x: &[f32],
        y: &mut [f32],
        n: usize,
    ) {
        let (cols, rows) = (x.len() / n, y.len() / n);
        for (set, run) in &self.sets {
            for (ad, s) in &set.adapters {
                if let (Some(lr), true) = (&ad.layers[li][t as usize], *s != 0.0) {
                    add_low_rank(
                        cpu,
                        &lr.a,
                        &lr.bt,
                        lr.rank,
                        &x[run.start * cols..run.end * cols],
                        run.len(),
                        lr.scale * s,
                        &mut y[run.start * rows..run.end * rows],
                    );
                }
            }
        }
    }

    /// Each sequence's embedding adapters: a token's row of `A` times `Bᵀ`, added to its
    /// embedding row times `scale` (Gemma's √hidden: PEFT scales the delta as the embedding).
    pub(super) fn embed(&self, cpu: Cpu, tokens: &[u32], x: &mut [f32], h: usize, scale: f32) {
        for (set, run) in &self.sets {
            for (ad, s) in &set.adapters {
                let (Some(lr), true) = (&ad.embed, *s != 0.0) else {
                    continue;
                };
                for r in run.clone() {
                    let t = tokens[r] as usize;
                    let row = &mut x[r * h..(r + 1) * h];
                    for j in 0..lr.rank {
                        let c = lr.a[t * lr.rank + j] * lr.scale * s * scale;
                        axpy(cpu, row, c, &lr.bt[j * h..(j + 1) * h]);
                    }
                }
            }
        }
    }

    /// The adapter set of row `r`, if its sequence has one.
    pub(super) fn set_of(&self, r: usize) -> Option<&AdapterSet> {
        self.sets
            .iter()
            .find(|(_, run)| run.contains(&r))
            .map(|(s, _)| &**s)
    }
}

/// `logits` (`n × vocab`) += the set's output-head adapters over `hidden` (`n × hidden`).
pub(super) fn add_head(cpu: Cpu, set: &AdapterSet, hidden: &[f32], n: usize, logits: &mut [f32]) {
    for (ad, s) in &set.adapters {
        if let (Some(lr), true) = (&ad.head, *s != 0.0) {
            add_low_rank(cpu, &lr.a, &lr.bt, lr.rank, hidden, n, lr.scale * s, logits);
        }
    }
}

/// The set's output-head adapters' share of the logits of just `ids` (`out[i]` for `ids[i]`).
pub(super) fn add_head_ids(
    cpu: Cpu,
    set: &AdapterSet,
    hidden: &[f32],
    ids: &[u32],
    out: &mut [f32],
) {
    for (ad, s) in &set.adapters {
        let (Some(lr), true) = (&ad.head, *s != 0.0) else {
            continue;
        };
        let t: Vec<f32> = (0..lr.rank)
            .map(|j| dot(cpu, &lr.a[j * lr.cols..(j + 1) * lr.cols], hidden))
            .collect();
        for (o, &id) in out.iter_mut().zip(ids) {
            *o += lr.scale * s * head_column(lr, &t, id as usize);
        }
    }
}

fn head_column(lr: &LowRank, t: &[f32], id: usize) -> f32 {
    t.iter()
        .enumerate()
        .map(|(j, tj)| tj * lr.bt[j * lr.rows + id])
        .sum()
}
