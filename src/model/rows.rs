//! The element-wise steps of a forward pass over `n` rows (norms, residual adds, biases),
//! split across rayon tasks only when the rows are many: a decode step's one row stays on the
//! calling thread (rayon, called from outside its pool, would cost a wake-up per step, and its
//! workers would compete with the worker pool's spinning ones). A batched decode step's few
//! rows go to the worker pool, in one part per thread: on the calling thread alone they left
//! the pool's other workers waiting.

use crate::kernels::norm::{rms_norm, rms_norm_in_place};
use crate::kernels::scalar::add_in_place;
use crate::kernels::Cpu;
use rayon::prelude::*;

/// Values per rayon task, at the least.
const PAR_MIN: usize = 1 << 15;
/// Values per rayon task in the flat element-wise steps.
pub(super) const ELEMS_PER_TASK: usize = 1 << 14;

/// Most rows a pass splits over the worker pool rather than rayon (a batched decode step).
const POOL_ROWS: usize = 16;

/// Whether `n` rows go to the worker pool.
pub(super) fn on_pool(n: usize) -> bool {
    (2..=POOL_ROWS).contains(&n)
}

/// `f(row index, row)` over every `len`-long row of `x` on the worker pool, one contiguous
/// part of the rows per thread.
pub(super) fn pool_rows(x: &mut [f32], len: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let n = x.len() / len.max(1);
    let pool = crate::pool::global();
    let per = n.div_ceil(pool.threads().clamp(1, n.max(1)));
    let parts: Vec<std::sync::Mutex<&mut [f32]>> = x
        .chunks_mut(per.max(1) * len)
        .map(std::sync::Mutex::new)
        .collect();
    pool.run(parts.len(), &|i| {
        let mut part = parts[i].lock().unwrap_or_else(|e| e.into_inner());
        for (j, row) in part.chunks_exact_mut(len).enumerate() {
            f(i * per + j, row);
        }
    });
}

/// Rows of `len` values per rayon task.
pub(super) fn rows_per_task(len: usize) -> usize {
    (PAR_MIN / len.max(1)).max(1)
}

/// RMSNorm of every `w.len()`-long row of `x`, rows in parallel.
pub(super) fn norm_rows(cpu: Cpu, x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    if on_pool(x.len() / w.len()) {
        let n = w.len();
        pool_rows(&mut out, n, |i, o| {
            rms_norm(cpu, &x[i * n..(i + 1) * n], w, eps, o)
        });
        return out;
    }
    out.par_chunks_exact_mut(w.len())
        .zip(x.par_chunks_exact(w.len()))
        .with_min_len(rows_per_task(w.len()))
        .for_each(|(o, r)| rms_norm(cpu, r, w, eps, o));
    out
}

/// RMSNorm in place of every row of `x` when there is a norm `w` (Gemma's output norms).
pub(super) fn norm_rows_in_place(cpu: Cpu, x: &mut [f32], w: Option<&[f32]>, eps: f32) {
    if let Some(w) = w {
        if on_pool(x.len() / w.len()) {
            return pool_rows(x, w.len(), |_, r| rms_norm_in_place(cpu, r, w, eps));
        }
        x.par_chunks_exact_mut(w.len())
            .with_min_len(rows_per_task(w.len()))
            .for_each(|r| rms_norm_in_place(cpu, r, w, eps));
    }
}

/// `x += y` over a batch of `len`-long rows, in parallel.
pub(super) fn add_rows(x: &mut [f32], y: &[f32], len: usize) {
    if on_pool(x.len() / len.max(1)) {
        return pool_rows(x, len, |i, r| add_in_place(r, &y[i * len..(i + 1) * len]));
    }
    x.par_chunks_mut(ELEMS_PER_TASK)
        .zip(y.par_chunks(ELEMS_PER_TASK))
        .with_min_len(rows_per_task(ELEMS_PER_TASK))
        .for_each(|(a, b)| add_in_place(a, b));
}
