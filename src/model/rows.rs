//! The element-wise steps of a forward pass over `n` rows (norms, residual adds, biases),
//! split across rayon tasks only when the rows are many: a decode step's one row stays on the
//! calling thread (rayon, called from outside its pool, would cost a wake-up per step, and its
//! workers would compete with the worker pool's spinning ones).

use crate::kernels::norm::{rms_norm, rms_norm_in_place};
use crate::kernels::Cpu;
use crate::ops::add_in_place;
use rayon::prelude::*;

/// Values per rayon task, at the least.
const PAR_MIN: usize = 1 << 15;
/// Values per rayon task in the flat element-wise steps.
pub(super) const ELEMS_PER_TASK: usize = 1 << 14;

/// Rows of `len` values per rayon task.
pub(super) fn rows_per_task(len: usize) -> usize {
    (PAR_MIN / len.max(1)).max(1)
}

/// RMSNorm of every `w.len()`-long row of `x`, rows in parallel.
pub(super) fn norm_rows(cpu: Cpu, x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    out.par_chunks_exact_mut(w.len())
        .zip(x.par_chunks_exact(w.len()))
        .with_min_len(rows_per_task(w.len()))
        .for_each(|(o, r)| rms_norm(cpu, r, w, eps, o));
    out
}

/// RMSNorm in place of every row of `x` when there is a norm `w` (Gemma's output norms).
pub(super) fn norm_rows_in_place(cpu: Cpu, x: &mut [f32], w: Option<&[f32]>, eps: f32) {
    if let Some(w) = w {
        x.par_chunks_exact_mut(w.len())
            .with_min_len(rows_per_task(w.len()))
            .for_each(|r| rms_norm_in_place(cpu, r, w, eps));
    }
}

/// `x += y` over a batch, in parallel.
pub(super) fn add_rows(x: &mut [f32], y: &[f32]) {
    x.par_chunks_mut(ELEMS_PER_TASK)
        .zip(y.par_chunks(ELEMS_PER_TASK))
        .with_min_len(rows_per_task(ELEMS_PER_TASK))
        .for_each(|(a, b)| add_in_place(a, b));
}
