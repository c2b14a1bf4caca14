//! The seeded draw: top-k, min-p and top-p over `(id, logit / temperature)` candidates, then
//! one uniform number walked down the candidates from the most likely.
//!
//! The definition is a full sort (value highest first, equal values by lower id) followed by
//! the filters; `reference_draw` in the tests is that definition written plainly. The
//! whole vocabulary is never sorted here, though: a served answer samples every token, and
//! sorting and exponentiating 49,152 logits took about 0.5 ms a token, 8 % of the machine's
//! CPU under 16 clients. Only the candidates the walk can reach are sorted, band by band of
//! value ([`Bands`]), and the one sum over the whole vocabulary (top-p's and a plain draw's
//! normaliser) is taken in id order, which needs no sort. Every other sum is over the sorted
//! prefix, as the definition has it, so the draw is the definition's bit for bit.

use super::SamplerConfig;
use crate::kernels::exp_weights::{exp_neg, max_value, weight_sum};
use crate::kernels::Cpu;

/// Scratch buffers, kept by the sampler between tokens.
#[derive(Default)]
pub(super) struct Buffers {
    /// The candidates sorted so far (one band after another).
    sorted: Vec<(u32, f32)>,
    /// One band before its sort.
    band: Vec<(u32, f32)>,
    /// The radix sort's second buffer.
    scratch: Vec<(u32, f32)>,
}

/// The drawn id: `u` in [0, 1) walked down `cand` ((id, logit / temperature) in increasing id
/// order, not empty) after the filters of `c`. May reorder `cand`.
pub(super) fn draw(
    c: &SamplerConfig,
    cand: &mut Vec<(u32, f32)>,
    buf: &mut Buffers,
    u: f64,
) -> u32 {
    let (max, nan) = max_value(Cpu::detect(), cand);
    if c.top_k > 0 && c.top_k < cand.len() {
        // The k best are the first k of the definition's order. They are among the values
        // within some depth of the maximum that at least k reach: keep those, select, then
        // sort only the k.
        if !nan && max.is_finite() {
            for depth in [4.0, 8.0, 16.0, 32.0] {
                let floor = max - depth;
                if cand.iter().filter(|&&(_, l)| l >= floor).count() >= c.top_k {
                    cand.retain(|&(_, l)| l >= floor);
                    break;
                }
            }
        }
        cand.select_nth_unstable_by(c.top_k - 1, order);
        cand.truncate(c.top_k);
        sort_candidates(cand, &mut buf.scratch);
        return filter_sorted(c, cand, u);
    }
    if nan || !max.is_finite() {
        // Logits no model should give: the definition, sorting everything.
        sort_candidates(cand, &mut buf.scratch);
        return filter_sorted(c, cand, u);
    }
    if c.min_p > 0.0 {
        // min-p keeps the ids at least min_p times as likely as the best (whose weight is
        // exactly 1); only those are sorted, and every later sum is over them.
        // A value more than 0.001 below max + ln(min_p) weighs under min_p × e^-0.001, far
        // beyond exp_neg's error, so only the values above that are computed. The margin
        // grows with |max|: at a tiny temperature the values' own rounding is coarser.
        let floor = max + c.min_p.ln() - (1e-3 + max.abs() * 1e-5);
        cand.retain(|&(_, l)| l >= floor && exp_neg(l - max) >= c.min_p);
        sort_candidates(cand, &mut buf.scratch);
        return filter_sorted(c, cand, u);
    }
    let z = weight_sum(Cpu::detect(), cand, max);
    let mut bands = Bands::new(max);
    buf.sorted.clear();
    let mut i = 0;
    // The next candidate in the definition's order, sorting one more band when needed.
    let mut next = |i: usize, buf: &mut Buffers| -> Option<(u32, f32)> {
        while i == buf.sorted.len() {
            if !bands.extend(cand, buf) {
                return None;
            }
        }
        let (id, l) = buf.sorted[i];
        Some((id, exp_neg(l - max)))
    };
    if c.top_p < 1.0 {
        // The smallest prefix whose share of the whole reaches top_p.
        let mut acc = 0.0f64;
        while let Some((_, p)) = next(i, buf) {
            i += 1;
            acc += p as f64 / z;
            if acc >= c.top_p as f64 {
                break;
            }
        }
        let kept = &buf.sorted[..i];
        let sum: f64 = kept.iter().map(|&(_, l)| exp_neg(l - max) as f64).sum();
        let mut r = u * sum;
        for &(id, l) in kept {
            r -= exp_neg(l - max) as f64;
            if r <= 0.0 {
                return id;
            }
        }
        return kept[kept.len() - 1].0;
    }
    let mut r = u * z;
    while let Some((id, p)) = next(i, buf) {
        i += 1;
        r -= p as f64;
        if r <= 0.0 {
            return id;
        }
    }
    buf.sorted[buf.sorted.len() - 1].0
}

/// The definition's order: value highest first, equal values by lower id.
fn order(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Bands of value below the maximum, highest first: the candidates within 6 of it (in units of
/// logit / temperature, so a factor e^-6 in weight), then 6 to 12, 12 to 24, and the rest. Each
/// band is a range of values, so sorting them one after another gives the order of a full sort.
/// A walk that stops in the first band (most of them: top-p's nucleus and a plain draw's mass
/// sit near the top) sorts only that band.
struct Bands {
    max: f32,
    /// Bands taken so far.
    taken: usize,
}

const BAND_DEPTHS: [f32; 3] = [6.0, 12.0, 24.0];

impl Bands {
    fn new(max: f32) -> Bands {
        Bands { max, taken: 0 }
    }

    /// Appends the next band, sorted, to `buf.sorted`; false when none is left.
    fn extend(&mut self, cand: &[(u32, f32)], buf: &mut Buffers) -> bool {
        if self.taken > BAND_DEPTHS.len() {
            return false;
        }
        let lo = BAND_DEPTHS
            .get(self.taken)
            .map_or(f32::NEG_INFINITY, |d| self.max - d);
        let hi = match self.taken {
            0 => f32::INFINITY,
            k => self.max - BAND_DEPTHS[k - 1],
        };
        self.taken += 1;
        buf.band.clear();
        buf.band.extend(
            cand.iter()
                .filter(|&&(_, l)| l >= lo && (l < hi || hi == f32::INFINITY)),
        );
        sort_candidates(&mut buf.band, &mut buf.scratch);
        buf.sorted.extend_from_slice(&buf.band);
        true
    }
}

/// The filters and the draw over candidates already in the definition's order.
fn filter_sorted(c: &SamplerConfig, cand: &mut Vec<(u32, f32)>, u: f64) -> u32 {
    let max = cand[0].1;
    let mut sum = 0.0f64;
    for (_, l) in cand.iter_mut() {
        *l = exp_neg(*l - max);
        sum += *l as f64;
    }
    // min-p: drop tokens less likely than min_p × the best one.
    if c.min_p > 0.0 {
        let floor = c.min_p * cand[0].1;
        cand.retain(|&(_, p)| p >= floor);
        sum = cand.iter().map(|&(_, p)| p as f64).sum();
    }
    // top-p: keep the smallest prefix whose mass reaches top_p.
    if c.top_p < 1.0 {
        let mut acc = 0.0f64;
        let mut keep = cand.len();
        for (i, &(_, p)) in cand.iter().enumerate() {
            acc += p as f64 / sum;
            if acc >= c.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        cand.truncate(keep);
        sum = cand.iter().map(|&(_, p)| p as f64).sum();
    }
    let mut r = u * sum;
    for &(id, p) in cand.iter() {
        r -= p as f64;
        if r <= 0.0 {
            return id;
        }
    }
    cand[cand.len() - 1].0
}

/// Sorts `(id, value)` candidates given in increasing id order by value, highest first, equal
/// values by lower id: the order of `sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)))`,
/// which it replaces because a whole vocabulary took that comparison sort about 3 ms per token
/// (measured: a 49,152-token vocabulary sampled at temperature 1 decoded at 140 tok/s instead of
/// 228, and 16 answers decoded together spent two thirds of each step sorting). A stable LSD
/// radix sort on the keys' total order, 11 bits a pass, gives the same order in linear time,
/// so the same seed draws the same token.
fn sort_candidates(cand: &mut Vec<(u32, f32)>, scratch: &mut Vec<(u32, f32)>) {
    if cand.len() < 512 {
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        return;
    }
    // total_cmp's order as unsigned integers, inverted for highest first.
    let key = |v: f32| {
        let b = v.to_bits();
        let k = if b & 0x8000_0000 != 0 {
            !b
        } else {
            b | 0x8000_0000
        };
        !k
    };
    scratch.clear();
    scratch.resize(cand.len(), (0, 0.0));
    let (mut src, mut dst) = (&mut *cand, &mut *scratch);
    for shift in [0u32, 11, 22] {
        let mut count = [0usize; 2048];
        for &(_, v) in src.iter() {
            count[((key(v) >> shift) & 2047) as usize] += 1;
        }
        let mut at = 0;
        for c in count.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        for &e in src.iter() {
            let d = &mut count[((key(e.1) >> shift) & 2047) as usize];
            dst[*d] = e;
            *d += 1;
        }
        std::mem::swap(&mut src, &mut dst);
    }
    // Three passes leave the result in `scratch`.
    std::mem::swap(cand, scratch);
}

#[cfg(test)]
mod tests {
    use super::super::Rng;
    use super::*;

    /// The definition, plainly: sort everything, then the filters in order. The one sum over
    /// the whole vocabulary (when no top-k or min-p narrows it first) is in id order.
    fn reference_draw(c: &SamplerConfig, cand: &[(u32, f32)], u: f64) -> u32 {
        let finite = cand.iter().all(|&(_, l)| l.is_finite());
        let narrowed = (c.top_k > 0 && c.top_k < cand.len()) || c.min_p > 0.0 || !finite;
        let mut s = cand.to_vec();
        s.sort_by(order);
        if c.top_k > 0 {
            s.truncate(c.top_k);
        }
        let max = s[0].1;
        let mut w: Vec<(u32, f32)> = s.iter().map(|&(id, l)| (id, exp_neg(l - max))).collect();
        let mut sum: f64 = if narrowed {
            w.iter().map(|&(_, p)| p as f64).sum()
        } else {
            weight_sum(Cpu::scalar(), cand, max)
        };
        if c.min_p > 0.0 {
            let floor = c.min_p * w[0].1;
            w.retain(|&(_, p)| p >= floor);
            sum = w.iter().map(|&(_, p)| p as f64).sum();
        }
        if c.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = w.len();
            for (i, &(_, p)) in w.iter().enumerate() {
                acc += p as f64 / sum;
                if acc >= c.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            w.truncate(keep);
            sum = w.iter().map(|&(_, p)| p as f64).sum();
        }
        let mut r = u * sum;
        for &(id, p) in &w {
            r -= p as f64;
            if r <= 0.0 {
                return id;
            }
        }
        w[w.len() - 1].0
    }

    #[test]
    fn banded_draws_are_the_full_sorts_draws() {
        let mut rng = Rng::new(11);
        let configs = [
            (0, 1.0, 0.0),
            (0, 0.95, 0.0),
            (0, 0.5, 0.0),
            (0, 0.999_999, 0.0),
            (0, 1e-6, 0.0),
            (40, 1.0, 0.0),
            (3, 0.9, 0.0),
            (0, 1.0, 0.05),
            (0, 0.9, 0.01),
            (50, 0.8, 0.1),
        ];
        let mut buf = Buffers::default();
        for n in [1usize, 2, 7, 31, 511, 513, 3001, 49_152] {
            for shape in 0..5 {
                // Narrow and wide spreads, many ties, a few outliers, and large values.
                let cand: Vec<(u32, f32)> = (0..n as u32)
                    .map(|i| {
                        let r = rng.next_f64();
                        let l = match shape {
                            0 => (r - 0.5) * 4.0,
                            1 => (r - 0.5) * 80.0,
                            2 => ((r * 12.0).floor() - 6.0) * 1.5,
                            3 => (r - 0.9) * 10.0 + if i % 997 == 3 { 15.0 } else { 0.0 },
                            // A tiny temperature: large values, coarsely rounded.
                            _ => 3.0e5 + (r - 0.5) * 8.0,
                        };
                        (i, l as f32)
                    })
                    .collect();
                for &(top_k, top_p, min_p) in &configs {
                    let c = SamplerConfig {
                        temperature: 1.0,
                        top_k,
                        top_p,
                        min_p,
                        ..SamplerConfig::default()
                    };
                    for k in 0..12 {
                        let u = match k {
                            0 => 0.0,
                            1 => 1.0 - f64::EPSILON,
                            _ => rng.next_f64(),
                        };
                        let want = reference_draw(&c, &cand, u);
                        let got = draw(&c, &mut cand.clone(), &mut buf, u);
                        assert_eq!(
                            got, want,
                            "n {n} shape {shape} {top_k}/{top_p}/{min_p} u {u}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn unusual_logits_draw_without_panicking() {
        let mut buf = Buffers::default();
        let c = SamplerConfig {
            temperature: 1.0,
            top_p: 0.9,
            ..SamplerConfig::default()
        };
        for cand in [
            vec![(0, f32::NEG_INFINITY), (1, f32::NEG_INFINITY)],
            vec![(0, 1.0), (1, f32::INFINITY), (2, 3.0)],
            vec![(0, f32::NAN), (1, 2.0)],
            vec![(0, f32::NEG_INFINITY), (1, 2.0), (2, 1.0)],
        ] {
            for u in [0.0, 0.5, 0.999] {
                let want = reference_draw(&c, &cand, u);
                assert_eq!(
                    draw(&c, &mut cand.clone(), &mut buf, u),
                    want,
                    "{cand:?} {u}"
                );
            }
        }
        // -inf beside finite logits is never drawn.
        let cand = vec![(0, f32::NEG_INFINITY), (1, 2.0), (2, 1.0)];
        assert!((0..50).all(|k| draw(&c, &mut cand.clone(), &mut buf, k as f64 / 50.0) != 0));
    }

    #[test]
    fn radix_order_is_the_comparison_sorts_order() {
        let mut rng = Rng::new(5);
        for n in [0usize, 1, 511, 512, 513, 4099, 49_152] {
            let specials = [
                f32::NAN,
                -f32::NAN,
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
            ];
            let cand: Vec<(u32, f32)> = (0..n as u32)
                .map(|i| {
                    let r = rng.next_f64();
                    let v = match rng.next_u64() % 10 {
                        0 => specials[(rng.next_u64() % 6) as usize],
                        1..=3 => ((r * 8.0).floor() - 4.0) as f32, // many ties
                        _ => ((r - 0.5) * 60.0) as f32,
                    };
                    (i, v)
                })
                .collect();
            let mut want = cand.clone();
            want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut got = cand.clone();
            sort_candidates(&mut got, &mut Vec::new());
            let bits =
                |v: &[(u32, f32)]| v.iter().map(|&(i, x)| (i, x.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n = {n}");
        }
    }
}
