//! LoRA adapters in the forward pass (`crate::lora`): each sequence's adapters added to its own
//! rows of a linear layer's output, its embedding rows and its logits, beside the base's
//! kernels. A pass where no sequence has an adapter runs exactly as it does without LoRA.

use super::linear::Linear;
use super::State;
use crate::kernels::lora::{axpy_rows, dot_rows};
use crate::kernels::Cpu;
use crate::lora::{AdapterSet, LowRank, Target};
use crate::model::lora_group::{add_low_ranks, LowRankJob, Projection};
use crate::pool;
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

    /// The layers `ls` (q/k/v, gate/up, or one) over `x` (`n × in`), each output plus each
    /// sequence's adapters' products for layer `li`'s targets over its rows. The adapters'
    /// projections `A·x` run in the layers' own pool job ([`Linear::forward_rows_with`]), the
    /// additions after it.
    pub(super) fn forward<const N: usize>(
        &self,
        cpu: Cpu,
        li: usize,
        ls: [(&Linear, Target); N],
        x: &[f32],
        n: usize,
        steps: bool,
    ) -> [Vec<f32>; N] {
        let mut jobs = Vec::new();
        for (set, run) in &self.sets {
            for (ad, s) in &set.adapters {
                for (o, (_, t)) in ls.iter().enumerate() {
                    if let (Some(lr), true) = (&ad.layers[li][*t as usize], *s != 0.0) {
                        jobs.push(LowRankJob {
                            a: lr.a.rows(),
                            bt: lr.bt.rows(),
                            rank: lr.rank,
                            scale: lr.scale * s,
                            out: o,
                            rows: run.clone(),
                        });
                    }
                }
            }
        }
        let linears = ls.map(|(l, _)| l);
        if jobs.is_empty() {
            return Linear::forward_rows(linears, x, n, steps);
        }
        let p = Projection::new(cpu, x, x.len() / n, &jobs);
        let mut ys = Linear::forward_rows_with(linears, x, n, steps, p.tasks(), &|i| p.run(i));
        let mut refs: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
        p.add_to(pool::global(), &mut refs);
        ys
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
                        let c = lr.a.get(t * lr.rank + j) * lr.scale * s * scale;
                        axpy_rows(cpu, row, c, lr.bt.rows().slice(j * h..(j + 1) * h));
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
    let jobs: Vec<LowRankJob> = set
        .adapters
        .iter()
        .filter_map(|(ad, s)| Some((ad.head.as_ref()?, *s)).filter(|(_, s)| *s != 0.0))
        .map(|(lr, s)| LowRankJob {
            a: lr.a.rows(),
            bt: lr.bt.rows(),
            rank: lr.rank,
            scale: lr.scale * s,
            out: 0,
            rows: 0..n,
        })
        .collect();
    if !jobs.is_empty() {
        add_low_ranks(
            cpu,
            pool::global(),
            hidden,
            hidden.len() / n,
            &jobs,
            &mut [logits],
        );
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
            .map(|j| {
                dot_rows(
                    cpu,
                    lr.a.rows().slice(j * lr.cols..(j + 1) * lr.cols),
                    hidden,
                )
            })
            .collect();
        for (o, &id) in out.iter_mut().zip(ids) {
            *o += lr.scale * s * head_column(lr, &t, id as usize);
        }
    }
}

fn head_column(lr: &LowRank, t: &[f32], id: usize) -> f32 {
    t.iter()
        .enumerate()
        .map(|(j, tj)| tj * lr.bt.get(j * lr.rows + id))
        .sum()
}
