//! Choosing each tensor's storage type so that a file fits a size budget with the least loss
//! (`pocket export --size 173MB`, `--bpw 4.8`).
//!
//! Each tensor offers a few storage types, each with its size and an estimated cost (the KL
//! divergence it adds to the model's output when it alone is stored that way, measured by the
//! engine: see `pocket::budget`). Costs of different tensors add up to first order (their
//! errors are independent), so the problem is a multiple-choice knapsack: one type per tensor,
//! total bytes within the budget, least total cost. It is solved the standard way: on each
//! tensor's lower convex hull of (bytes, cost), take the upgrades that buy the most cost per
//! byte first, then improve by local moves (an upgrade that fits what is left, or one paid for
//! by a downgrade elsewhere) until none helps. The test below checks the result against the
//! exact optimum.

use crate::quant::search::Method;
use crate::quant::{q4, q8, QuantType};

/// One storage type a tensor can take.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Choice {
    pub dtype: QuantType,
    pub bytes: u64,
    /// Estimated KL divergence this choice adds (lower is better; never negative).
    pub cost: f64,
}

/// The choices of one tensor.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TensorChoices {
    pub name: String,
    pub choices: Vec<Choice>,
}

/// The chosen index into each tensor's `choices`, with totals.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub picks: Vec<usize>,
    pub bytes: u64,
    pub cost: f64,
}

/// Why no plan fits.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("the smallest choice of every tensor takes {smallest} bytes, over the budget of {budget}")]
pub struct TooSmall {
    pub smallest: u64,
    pub budget: u64,
}

/// The indices of `choices` on its lower convex hull of (bytes, cost), from the smallest:
/// every step to the next one costs more bytes and buys a smaller saving per byte than the one
/// before.
fn hull(choices: &[Choice]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..choices.len()).collect();
    idx.sort_by(|&a, &b| {
        choices[a]
            .bytes
            .cmp(&choices[b].bytes)
            .then(choices[a].cost.total_cmp(&choices[b].cost))
    });
    let mut h: Vec<usize> = Vec::new();
    for i in idx {
        let c = choices[i];
        // A choice at least as big and no better than the last kept one is dominated.
        if let Some(&last) = h.last() {
            if c.cost >= choices[last].cost {
                continue;
            }
            if c.bytes == choices[last].bytes {
                h.pop();
            }
        }
        // Drop kept points that lie on or above the segment to the new one.
        while h.len() >= 2 {
            let (a, b) = (choices[h[h.len() - 2]], choices[h[h.len() - 1]]);
            let slope_ab = (a.cost - b.cost) / (b.bytes - a.bytes) as f64;
            let slope_bc = (b.cost - c.cost) / (c.bytes - b.bytes) as f64;
            if slope_bc >= slope_ab {
                h.pop();
            } else {
                break;
            }
        }
        h.push(i);
    }
    h
}

/// A local move: its saving, the tensor and its new choice, and the tensor and choice that
/// pay for it (if any).
type Move = (f64, usize, usize, Option<(usize, usize)>);

/// The plan with the least total cost whose bytes fit `budget`, or [`TooSmall`].
pub fn choose(tensors: &[TensorChoices], budget: u64) -> Result<Plan, TooSmall> {
    let hulls: Vec<Vec<usize>> = tensors.iter().map(|t| hull(&t.choices)).collect();
    let mut pos = vec![0usize; tensors.len()];
    let mut bytes: u64 = tensors
        .iter()
        .zip(&hulls)
        .map(|(t, h)| h.first().map_or(0, |&i| t.choices[i].bytes))
        .sum();
    if bytes > budget {
        return Err(TooSmall {
            smallest: bytes,
            budget,
        });
    }
    // Greedy along the hulls: repeatedly take the upgrade with the largest saving per byte.
    // The hulls are convex, so each tensor's next step is its best one.
    let step = |t: usize, p: usize| -> Option<(f64, u64)> {
        let h = &hulls[t];
        let (a, b) = (tensors[t].choices[h[p]], tensors[t].choices[*h.get(p + 1)?]);
        let db = b.bytes - a.bytes;
        Some(((a.cost - b.cost) / db as f64, db))
    };
    let mut stuck = vec![false; tensors.len()];
    loop {
        let best = (0..tensors.len())
            .filter(|&t| !stuck[t])
            .filter_map(|t| step(t, pos[t]).map(|(gain, db)| (t, gain, db)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((t, _, db)) = best else { break };
        if bytes + db <= budget {
            bytes += db;
            pos[t] += 1;
        } else {
            stuck[t] = true;
        }
    }
    let mut picks: Vec<usize> = pos.iter().zip(&hulls).map(|(&p, h)| h[p]).collect();
    // Then local moves until none helps: an upgrade that fits what is left, or an upgrade paid
    // for by a downgrade elsewhere (the exchanges the greedy order cannot make).
    for _ in 0..4 * tensors.len() + 16 {
        let slack = (budget - bytes) as i64;
        let mut best: Option<Move> = None;
        let mut better = |cand: Move| {
            if cand.0 > 1e-15 && best.is_none_or(|b| cand.0 > b.0) {
                best = Some(cand);
            }
        };
        for (t, tc) in tensors.iter().enumerate() {
            let now = tc.choices[picks[t]];
            for (i, up) in tc.choices.iter().enumerate() {
                if up.cost >= now.cost {
                    continue;
                }
                let gain = now.cost - up.cost;
                let need = up.bytes as i64 - now.bytes as i64 - slack;
                if need <= 0 {
                    better((gain, t, i, None));
                    continue;
                }
                for (u, uc) in tensors.iter().enumerate().filter(|&(u, _)| u != t) {
                    let had = uc.choices[picks[u]];
                    for (j, down) in uc.choices.iter().enumerate() {
                        if had.bytes as i64 - down.bytes as i64 >= need {
                            better((gain - (down.cost - had.cost), t, i, Some((u, j))));
                        }
                    }
                }
            }
        }
        let Some((_, t, i, pay)) = best else { break };
        let mut take = |t: usize, i: usize| {
            bytes = bytes - tensors[t].choices[picks[t]].bytes + tensors[t].choices[i].bytes;
            picks[t] = i;
        };
        if let Some((u, j)) = pay {
            take(u, j);
        }
        take(t, i);
    }
    let cost = picks
        .iter()
        .zip(tensors)
        .map(|(&i, t)| t.choices[i].cost)
        .sum();
    Ok(Plan { picks, bytes, cost })
}

/// `values` (a `[rows, cols]` matrix) stored as `dtype` and read back, with the same search
/// (and calibration weights) the writer uses; `None` for types this cannot encode or shapes
/// they do not fit.
pub fn roundtrip(
    values: &[f32],
    rows: usize,
    cols: usize,
    dtype: QuantType,
    method: Method,
    importance: Option<&[f32]>,
) -> Option<Vec<f32>> {
    dtype.byte_size(rows, cols)?;
    let mut out = vec![0f32; rows * cols];
    match dtype {
        QuantType::Q4 { block, sym } => {
            let q = q4::quantize(
                values,
                rows,
                cols,
                q4::Options {
                    block,
                    sym,
                    method,
                    grid: false,
                    importance: importance.filter(|a| a.len() == cols && method != Method::Rtn),
                    compensation: None,
                },
            );
            let (codes, params) = q.bytes.split_at(rows * cols / 2);
            let pb = q4::param_bytes(sym) * (cols / block);
            for (r, o) in out.chunks_exact_mut(cols).enumerate() {
                q4::dequantize_row(
                    &codes[r * cols / 2..(r + 1) * cols / 2],
                    &params[r * pb..(r + 1) * pb],
                    block,
                    sym,
                    o,
                );
            }
        }
        QuantType::Q8 { block } => {
            let (bytes, _) = q8::quantize(values, rows, cols, block);
            let (codes, scales) = bytes.split_at(rows * cols);
            let sb = 2 * (cols / block);
            for (r, o) in out.chunks_exact_mut(cols).enumerate() {
                q8::dequantize_row(
                    &codes[r * cols..(r + 1) * cols],
                    &scales[r * sb..(r + 1) * sb],
                    block,
                    o,
                );
            }
        }
        QuantType::F16 => {
            let mut b = Vec::new();
            crate::quant::dense::encode_f16(values, &mut b);
            crate::quant::dense::decode_f16(&b, &mut out);
        }
        QuantType::BF16 => {
            let mut b = Vec::new();
            crate::quant::dense::encode_bf16(values, &mut b);
            crate::quant::dense::decode_bf16(&b, &mut out);
        }
        QuantType::F32 => out.copy_from_slice(values),
        QuantType::Ggml(t) if crate::gguf::quantize::ENCODED.contains(&t) => {
            let imp = importance.filter(|a| a.len() == cols && method != Method::Rtn);
            let mut b = Vec::new();
            crate::gguf::quantize::quantize_weighted(t, values, cols, imp, &mut b);
            crate::gguf::ggml::dequantize(t, &b, &mut out);
        }
        QuantType::Ggml(_) => return None,
    }
    Some(out)
}

/// The squared error of `back` against `values`, each column weighted by its mean squared
/// activation (the error of the layer's output, up to a constant), or unweighted.
pub fn weighted_error(
    values: &[f32],
    back: &[f32],
    cols: usize,
    importance: Option<&[f32]>,
) -> f64 {
    let imp = importance.filter(|a| a.len() == cols);
    values
        .chunks_exact(cols)
        .zip(back.chunks_exact(cols))
        .map(|(v, b)| {
            v.iter()
                .zip(b)
                .enumerate()
                .map(|(j, (&x, &y))| {
                    let d = (x - y) as f64;
                    d * d * imp.map_or(1.0, |a| a[j] as f64)
                })
                .sum::<f64>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    fn instance(seed: &mut u64, n: usize) -> Vec<TensorChoices> {
        (0..n)
            .map(|t| {
                let base = 50 + (rng(seed) * 100.0) as u64;
                let sens = rng(seed) * 10.0;
                let choices = [4.25, 4.5, 5.0, 8.5, 16.0]
                    .iter()
                    .map(|&bits| Choice {
                        dtype: QuantType::F32,
                        bytes: (base as f64 * bits) as u64,
                        // Error halves per extra bit, with noise so hulls are not trivial.
                        cost: sens * 2f64.powf(-bits) * (0.7 + 0.6 * rng(seed)),
                    })
                    .collect();
                TensorChoices {
                    name: format!("t{t}"),
                    choices,
                }
            })
            .collect()
    }

    /// The exact optimum by dynamic programming over bytes (the sizes here are small).
    fn exact(tensors: &[TensorChoices], budget: u64) -> f64 {
        let b = budget as usize;
        let mut best = vec![0.0f64; b + 1];
        let mut first = true;
        for t in tensors {
            let mut next = vec![f64::INFINITY; b + 1];
            for used in 0..=b {
                for c in &t.choices {
                    let cb = c.bytes as usize;
                    if cb <= used {
                        let prev = if first { 0.0 } else { best[used - cb] };
                        next[used] = next[used].min(prev + c.cost);
                    }
                }
            }
            best = next;
            first = false;
        }
        best[b]
    }

    #[test]
    fn the_greedy_plan_fits_and_is_near_the_optimum() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut worst: f64 = 0.0;
        for round in 0..40 {
            let ts = instance(&mut seed, 40);
            let min: u64 = ts.iter().map(|t| t.choices[0].bytes).sum();
            let max: u64 = ts.iter().map(|t| t.choices[4].bytes).sum();
            let budget = min + ((max - min) as f64 * rng(&mut seed)) as u64;
            let plan = choose(&ts, budget).unwrap();
            assert!(
                plan.bytes <= budget,
                "round {round}: {} > {budget}",
                plan.bytes
            );
            let sum: u64 = plan
                .picks
                .iter()
                .zip(&ts)
                .map(|(&i, t)| t.choices[i].bytes)
                .sum();
            assert_eq!(sum, plan.bytes);
            let opt = exact(&ts, budget);
            assert!(plan.cost >= opt - 1e-9, "round {round}: below the optimum?");
            worst = worst.max(plan.cost / opt - 1.0);
        }
        // With tens of tensors (a real model has hundreds) one upgrade is a small part of the
        // whole: the greedy plan stays within 2 % of the exact optimum.
        assert!(
            worst < 0.02,
            "worst plan {:.1} % above the optimum",
            worst * 100.0
        );
    }

    #[test]
    fn more_budget_never_costs_more_and_too_little_is_refused() {
        let mut seed = 7u64;
        let ts = instance(&mut seed, 40);
        let min: u64 = ts.iter().map(|t| t.choices[0].bytes).sum();
        assert_eq!(
            choose(&ts, min - 1),
            Err(TooSmall {
                smallest: min,
                budget: min - 1
            })
        );
        let mut last = f64::INFINITY;
        for extra in (0..=4000).step_by(250) {
            let p = choose(&ts, min + extra).unwrap();
            assert!(
                p.cost <= last + 1e-12,
                "budget +{extra}: {} after {last}",
                p.cost
            );
            last = p.cost;
        }
    }

    #[test]
    fn dominated_choices_leave_the_hull() {
        let c = |bytes, cost| Choice {
            dtype: QuantType::F32,
            bytes,
            cost,
        };
        // (20, 5) is dominated by (10, 4); (30, 2.9) lies above the segment (10,4)-(40,0).
        let h = hull(&[c(10, 4.0), c(20, 5.0), c(30, 2.9), c(40, 0.0)]);
        assert_eq!(h, vec![0, 3]);
    }

    #[test]
    fn roundtrip_matches_the_codecs() {
        let mut seed = 3u64;
        let (rows, cols) = (5, 256);
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| (rng(&mut seed) - 0.5) as f32)
            .collect();
        for dtype in [
            QuantType::Q4 {
                block: 32,
                sym: true,
            },
            QuantType::Q4 {
                block: 128,
                sym: false,
            },
            QuantType::Ggml(crate::gguf::GgmlType::Q5_0),
            QuantType::Ggml(crate::gguf::GgmlType::Q5_1),
            QuantType::Q8 { block: 64 },
        ] {
            let back = roundtrip(&v, rows, cols, dtype, Method::Search, None).unwrap();
            let e = weighted_error(&v, &back, cols, None)
                / v.iter().map(|x| (x * x) as f64).sum::<f64>();
            // Relative squared error: 4-bit about 1e-2, 5-bit a quarter of that, 8-bit 1e-5.
            let bound = match dtype {
                QuantType::Q8 { .. } => 1e-4,
                QuantType::Ggml(_) => 6e-3,
                _ => 3e-2,
            };
            assert!(e > 0.0 && e < bound, "{dtype}: {e}");
        }
        assert!(roundtrip(
            &v,
            rows,
            100,
            QuantType::Q8 { block: 64 },
            Method::Search,
            None
        )
        .is_none());
    }
}
