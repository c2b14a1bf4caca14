//! LoRA products for a group of outputs that read the same input (q/k/v, gate/up; or one
//! matrix) on the worker pool, in two stages: [`Projection`] computes each adapter's `t = A·x`
//! (tasks of a few ranks), and [`Projection::add_to`] adds `s·Bᵀᵀ t` to the outputs (tasks of
//! row runs, or column bands of a row when there are few rows, as in decoding). The first
//! stage's tasks can join the base layer's own pool job (`Linear::forward_rows_with`), so in
//! decoding the adapter's `A` is read while the base's weights stream, with no extra barrier.
//!
//! Jobs adding to the same element add in their order within one task, each element as
//! [`add_low_rank`](crate::kernels::lora::add_low_rank) computes it, so the result is the same on any
//! number of threads and however the first stage is scheduled.

use crate::kernels::lora::{expand, project, Rows};
use crate::kernels::Cpu;
use crate::pool::Pool;
use std::ops::Range;
use std::sync::Mutex;

/// One adapter's low-rank product over a run of rows of one output of a group:
/// `ys[out][r] += scale · Bᵀᵀ (A · x[r])` for `r` in `rows`.
pub struct LowRankJob<'a> {
    /// `[rank, cols]`.
    pub a: Rows<'a>,
    /// `[rank, out columns]`.
    pub bt: Rows<'a>,
    pub rank: usize,
    pub scale: f32,
    /// Which of the group's outputs.
    pub out: usize,
    pub rows: Range<usize>,
}

/// Ranks per first-stage task.
const RANKS_PER_TASK: usize = 4;
/// Narrowest column band of one row in the second stage: a multiple of every ISA's lanes, so
/// a band's last elements take the same (vector or tail) path as in a whole row.
const MIN_BAND: usize = 128;

/// A second-stage task: output, first row, rows, first column, and that block of the output.
type Block<'y> = (usize, usize, usize, usize, Mutex<&'y mut [f32]>);

/// The first stage of a group's adapter products, and what it computed.
pub struct Projection<'a> {
    cpu: Cpu,
    x: &'a [f32],
    cols: usize,
    jobs: &'a [LowRankJob<'a>],
    /// Per task: its job, its first rank, and `t[rank - first][row - rows.start]`.
    parts: Vec<(usize, usize, Mutex<Vec<f32>>)>,
    /// Each job's first task.
    first_part: Vec<usize>,
}

impl<'a> Projection<'a> {
    /// The tasks for `jobs` over `x` (`n × cols`).
    pub fn new(cpu: Cpu, x: &'a [f32], cols: usize, jobs: &'a [LowRankJob<'a>]) -> Self {
        let n = x.len() / cols.max(1);
        let mut parts = Vec::new();
        let mut first_part = Vec::with_capacity(jobs.len());
        for (ji, j) in jobs.iter().enumerate() {
            assert!(
                j.rows.end <= n && j.a.len() == j.rank * cols,
                "LoRA projection: shapes disagree"
            );
            first_part.push(parts.len());
            if j.rows.is_empty() {
                continue;
            }
            for j0 in (0..j.rank).step_by(RANKS_PER_TASK) {
                let ranks = RANKS_PER_TASK.min(j.rank - j0);
                parts.push((ji, j0, Mutex::new(vec![0f32; ranks * j.rows.len()])));
            }
        }
        Projection {
            cpu,
            x,
            cols,
            jobs,
            parts,
            first_part,
        }
    }

    /// Number of first-stage tasks.
    pub fn tasks(&self) -> usize {
        self.parts.len()
    }

    /// Runs first-stage task `i`.
    pub fn run(&self, i: usize) {
        let (ji, j0, ref out) = self.parts[i];
        let (job, cols) = (&self.jobs[ji], self.cols);
        let nr = job.rows.len();
        let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
        let ranks = out.len() / nr;
        let a = job.a.slice(j0 * cols..(j0 + ranks) * cols);
        let mut t = [0f32; RANKS_PER_TASK];
        for (i, r) in job.rows.clone().enumerate() {
            let xr = &self.x[r * cols..(r + 1) * cols];
            project(self.cpu, a, cols, xr, &mut t[..ranks]);
            for (k, &v) in t[..ranks].iter().enumerate() {
                out[k * nr + i] = v;
            }
        }
    }

    /// The second stage, once every first-stage task has run: each job's product added to
    /// its output rows.
    pub fn add_to(self, pool: &Pool, ys: &mut [&mut [f32]]) {
        let Projection {
            cpu,
            x,
            cols,
            jobs,
            parts,
            first_part,
        } = self;
        let n = x.len() / cols.max(1);
        let widths: Vec<usize> = ys.iter().map(|y| y.len() / n.max(1)).collect();
        for j in jobs {
            let w = widths[j.out];
            assert!(
                j.bt.len() == j.rank * w && ys[j.out].len() == n * w,
                "LoRA products: shapes disagree"
            );
        }
        let ts: Vec<Vec<f32>> = parts
            .into_iter()
            .map(|(_, _, t)| t.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect();
        // t of job `ji`, rank `j`, its row `i`.
        let t_of = |ji: usize, j: usize, i: usize| {
            let nr = jobs[ji].rows.len();
            ts[first_part[ji] + j / RANKS_PER_TASK][(j % RANKS_PER_TASK) * nr + i]
        };
        let threads = pool.threads();
        let mut blocks: Vec<Block> = Vec::new();
        for (o, y) in ys.iter_mut().enumerate() {
            let w = widths[o];
            let touched = |r0: usize, r1: usize| {
                jobs.iter()
                    .any(|j| j.out == o && j.rows.start < r1 && r0 < j.rows.end)
            };
            if w == 0 {
                continue;
            }
            if n >= 2 * threads {
                let per = n.div_ceil(4 * threads);
                for (c, block) in y.chunks_mut(per * w).enumerate() {
                    let r0 = c * per;
                    let nr = block.len() / w;
                    if touched(r0, r0 + nr) {
                        blocks.push((o, r0, nr, 0, Mutex::new(block)));
                    }
                }
            } else {
                let band = w.div_ceil(threads).next_multiple_of(MIN_BAND).max(MIN_BAND);
                for (r, row) in y.chunks_mut(w).enumerate() {
                    if !touched(r, r + 1) {
                        continue;
                    }
                    for (b, block) in row.chunks_mut(band).enumerate() {
                        blocks.push((o, r, 1, b * band, Mutex::new(block)));
                    }
                }
            }
        }
        pool.run(blocks.len(), &|i| {
            let (o, r0, nr, c0, ref block) = blocks[i];
            let mut block = block.lock().unwrap_or_else(|e| e.into_inner());
            let bw = block.len() / nr;
            let w = widths[o];
            for (ji, job) in jobs.iter().enumerate().filter(|(_, j)| j.out == o) {
                let mut alpha = vec![0f32; job.rank];
                for r in r0.max(job.rows.start)..(r0 + nr).min(job.rows.end) {
                    let yr = &mut block[(r - r0) * bw..(r - r0 + 1) * bw];
                    for (j, al) in alpha.iter_mut().enumerate() {
                        *al = job.scale * t_of(ji, j, r - job.rows.start);
                    }
                    expand(cpu, yr, &alpha, job.bt, w, c0);
                }
            }
        });
    }
}

/// Both stages on the pool, one after the other.
pub fn add_low_ranks(
    cpu: Cpu,
    pool: &Pool,
    x: &[f32],
    cols: usize,
    jobs: &[LowRankJob],
    ys: &mut [&mut [f32]],
) {
    let p = Projection::new(cpu, x, cols, jobs);
    pool.run(p.tasks(), &|i| p.run(i));
    p.add_to(pool, ys);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::lora::add_low_rank;
    use crate::kernels::testutil::{half_bits, Rng};

    /// The pooled group kernel equals the one-matrix kernel bit for bit, on 1, 2 and 3
    /// threads, for decode-sized and prefill-sized row counts, with two jobs on one output.
    #[test]
    fn pooled_groups_equal_the_serial_kernel_bit_for_bit() {
        let mut rng = Rng(43);
        // Pool workers never exit: one pool per size for the whole test.
        let pools: Vec<Pool> = [1, 2, 3].into_iter().map(Pool::new).collect();
        for &(n, cols) in &[(1, 896), (3, 129), (37, 64)] {
            let widths = [896usize, 130, 2560];
            let shapes = [(16, 0, 0..n), (5, 1, 0..n), (3, 2, 0..n), (7, 0, n / 2..n)];
            let facs: Vec<(Vec<f32>, Vec<f32>)> = shapes
                .iter()
                .map(|(r, o, _)| (rng.vec(r * cols, 0.5), rng.vec(r * widths[*o], 0.5)))
                .collect();
            let halves: Vec<(Vec<u16>, Vec<u16>)> = facs
                .iter()
                .map(|(a, b)| (half_bits(a), half_bits(b)))
                .collect();
            let x = rng.vec(n * cols, 2.0);
            let y0: Vec<Vec<f32>> = widths.iter().map(|w| rng.vec(n * w, 1.0)).collect();
            // Factors in f32, in f16, and the two mixed (jobs 1 and 3 in f16).
            for (cpu, mix) in crate::kernels::Cpu::each()
                .into_iter()
                .flat_map(|c| [(c, 0), (c, 1), (c, 2)])
            {
                let rows_of = |i: usize| -> (Rows, Rows) {
                    if mix == 1 || (mix == 2 && i % 2 == 1) {
                        (Rows::F16(&halves[i].0), Rows::F16(&halves[i].1))
                    } else {
                        (Rows::F32(&facs[i].0), Rows::F32(&facs[i].1))
                    }
                };
                let mut want = y0.clone();
                for (i, (r, o, rows)) in shapes.iter().enumerate() {
                    let w = widths[*o];
                    let y = &mut want[*o][rows.start * w..rows.end * w];
                    let xs = &x[rows.start * cols..rows.end * cols];
                    let (a, bt) = rows_of(i);
                    add_low_rank(cpu, a, bt, *r, xs, rows.len(), 0.3, y);
                }
                for pool in &pools {
                    let threads = pool.threads();
                    let jobs: Vec<LowRankJob> = shapes
                        .iter()
                        .enumerate()
                        .map(|(i, (r, o, rows))| LowRankJob {
                            a: rows_of(i).0,
                            bt: rows_of(i).1,
                            rank: *r,
                            scale: 0.3,
                            out: *o,
                            rows: rows.clone(),
                        })
                        .collect();
                    let mut got = y0.clone();
                    let mut ys: Vec<&mut [f32]> = got.iter_mut().map(|y| &mut y[..]).collect();
                    add_low_ranks(cpu, pool, &x, cols, &jobs, &mut ys);
                    assert_eq!(
                        got, want,
                        "{cpu:?} mix {mix} n={n} cols={cols} threads={threads}"
                    );
                }
            }
        }
    }
}
