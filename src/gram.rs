//! The calibration activations' Gram matrices `H = Σ xᵀx`, one per linear-layer input, and
//! from them GPTQ's compensation factors (`pocket_formats::quant::gptq`), for `--gptq`.
//!
//! Only the upper triangle is accumulated, in f32 (a few thousand tokens; the factorisation
//! damps the diagonal by 1 % of its mean, far above that rounding), rows of `H` in parallel.
//! The factorisations run after the pass, sites in parallel, and each `H` is dropped as soon
//! as its factor exists: memory peaks at about one `cols²` f32 matrix per site.

use crate::model::Site;
use pocket_formats::quant::gptq::Compensation;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Upper triangles of `Σ xᵀx` per (layer, site), with their widths and row counts.
#[derive(Default)]
pub struct GramSums {
    sums: HashMap<(usize, u8), (usize, usize, Vec<f32>)>,
}

impl GramSums {
    /// Adds the rows (`n × width`) seen at `(layer, site)`.
    pub fn add(&mut self, layer: usize, site: u8, width: usize, rows: &[f32]) {
        let (_, count, h) = self
            .sums
            .entry((layer, site))
            .or_insert_with(|| (width, 0, vec![0.0; width * width]));
        *count += rows.len() / width;
        // Four tokens per pass over a row of H, so the row is loaded and stored a quarter as
        // often (the sums' order is fixed either way).
        let tokens: Vec<&[f32]> = rows.chunks_exact(width).collect();
        h.par_chunks_mut(width).enumerate().for_each(|(i, hi)| {
            let mut quads = tokens.chunks_exact(4);
            for q in &mut quads {
                let (a, b, c, d) = (&q[0][i..], &q[1][i..], &q[2][i..], &q[3][i..]);
                let (xa, xb, xc, xd) = (a[0], b[0], c[0], d[0]);
                for (k, acc) in hi[i..].iter_mut().enumerate() {
                    *acc += xa * a[k] + xb * b[k] + xc * c[k] + xd * d[k];
                }
            }
            for x in quads.remainder() {
                let xi = x[i];
                for (acc, &xj) in hi[i..].iter_mut().zip(&x[i..]) {
                    *acc += xi * xj;
                }
            }
        });
    }

    /// Each site's compensation, by the weight names that read that input (`site_of` maps the
    /// stored key back to its [`Site`]). The tied embedding is left out: its rows are also
    /// looked up as embeddings, where the head's activations say nothing of their errors.
    /// Sites whose `H` cannot be factored are left out (their weights get the search alone).
    pub fn compensations(
        self,
        site_of: impl Fn(u8) -> Site + Sync,
        tied: bool,
    ) -> HashMap<String, Arc<Compensation>> {
        type Entry = ((usize, u8), (usize, usize, Vec<f32>));
        let sites: Vec<Entry> = self.sums.into_iter().collect();
        let done: Vec<(Vec<String>, Option<Compensation>)> = sites
            .into_par_iter()
            .map(|((layer, k), (n, tokens, upper))| {
                let site = site_of(k);
                let names: Vec<String> = site
                    .weights(layer, tied)
                    .into_iter()
                    .filter(|w| w != "model.embed_tokens.weight")
                    .collect();
                if names.is_empty() {
                    return (names, None);
                }
                let mut full = vec![0f64; n * n];
                for i in 0..n {
                    for j in i..n {
                        let v = upper[i * n + j] as f64;
                        full[i * n + j] = v;
                        full[j * n + i] = v;
                    }
                }
                drop(upper);
                (names, Compensation::from_gram(&full, n, tokens))
            })
            .collect();
        let mut out = HashMap::new();
        for (names, c) in done {
            if let Some(c) = c {
                let c = Arc::new(c);
                for n in names {
                    out.insert(n, c.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accumulated triangle equals the direct sum, over several calls.
    #[test]
    fn sums_are_the_gram_matrix() {
        let w = 5;
        // Nine tokens in two calls: groups of four and the rest.
        let rows: Vec<f32> = (0..9 * w).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut g = GramSums::default();
        g.add(0, 2, w, &rows[..6 * w]);
        g.add(0, 2, w, &rows[6 * w..]);
        let (_, count, h) = &g.sums[&(0, 2)];
        assert_eq!(*count, 9);
        for i in 0..w {
            for j in i..w {
                let want: f32 = rows.chunks_exact(w).map(|x| x[i] * x[j]).sum();
                assert!((h[i * w + j] - want).abs() < 1e-5, "({i},{j})");
            }
        }
    }
}
