//! Linear layers (weight and optional bias) over one row or a batch of rows, and the observer
//! hooks that see each layer's input rows (calibrated quantization reads them).

use super::rows::rows_per_task;
use crate::kernels::scalar::add_in_place;
use crate::weights::Matrix;
use rayon::prelude::*;

/// A linear layer: weight and optional bias.
pub struct Linear {
    pub weight: Matrix,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    /// Layers that read the same `n` input rows (q/k/v, gate/up), as one job: one row takes
    /// the mat-vec kernels ([`Matrix::matvec_group`]: the input quantized once, every matrix's
    /// row bands in one wake-up of the worker pool), more rows the batched ones
    /// ([`Matrix::matmul_group`]). Every caller with one row, whatever it is (decode, a
    /// one-token prompt, a one-sequence batch), so computes the same bits. With `steps`, many
    /// rows compute the bits each would as one row ([`Matrix::matmul_group_as_matvec`]).
    pub fn forward_rows<const N: usize>(
        ls: [&Linear; N],
        x: &[f32],
        n: usize,
        steps: bool,
    ) -> [Vec<f32>; N] {
        Linear::forward_rows_with(ls, x, n, steps, 0, &|_| {})
    }

    /// [`Linear::forward_rows`], and `extra` more pool tasks `f(0..extra)` (an adapter's
    /// projections of the same input): in the mat-vec's own pool job for one row, after the
    /// products for more.
    pub fn forward_rows_with<const N: usize>(
        ls: [&Linear; N],
        x: &[f32],
        n: usize,
        steps: bool,
        extra: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> [Vec<f32>; N] {
        let ms = ls.map(|l| &l.weight);
        let mut ys = ls.map(|l| vec![0.0f32; n * l.weight.rows]);
        {
            let mut refs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
            match (n, N) {
                (1, 1) if extra == 0 => ms[0].matvec(x, refs[0]),
                (1, _) => Matrix::matvec_group_with(&ms, x, &mut refs, extra, f),
                _ => {
                    if steps {
                        Matrix::matmul_group_as_matvec(&ms, x, n, &mut refs)
                    } else {
                        Matrix::matmul_group(&ms, x, n, &mut refs)
                    }
                    crate::pool::global().run(extra, f);
                }
            }
        }
        for (l, y) in ls.iter().zip(ys.iter_mut()) {
            if let Some(b) = &l.bias {
                y.par_chunks_exact_mut(l.weight.rows)
                    .with_min_len(rows_per_task(l.weight.rows))
                    .for_each(|row| add_in_place(row, b));
            }
        }
        ys
    }
}

/// Where a linear layer's input is seen by an [`Observer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The normed input of q/k/v_proj.
    AttnIn,
    /// The attention output, o_proj's input.
    AttnOut,
    /// The normed input of gate/up_proj.
    MlpIn,
    /// SiLU(gate)·up, down_proj's input.
    MlpDown,
    /// The final normed hidden state, the head's input (layer index = number of layers).
    Head,
}

impl Site {
    /// The HF names of the weights that read this input in `layer`.
    pub fn weights(self, layer: usize, tied: bool) -> Vec<String> {
        let p = format!("model.layers.{layer}");
        match self {
            Site::AttnIn => ["q_proj", "k_proj", "v_proj"]
                .iter()
                .map(|n| format!("{p}.self_attn.{n}.weight"))
                .collect(),
            Site::AttnOut => vec![format!("{p}.self_attn.o_proj.weight")],
            Site::MlpIn => ["gate_proj", "up_proj"]
                .iter()
                .map(|n| format!("{p}.mlp.{n}.weight"))
                .collect(),
            Site::MlpDown => vec![format!("{p}.mlp.down_proj.weight")],
            Site::Head if tied => vec!["model.embed_tokens.weight".into()],
            Site::Head => vec!["lm_head.weight".into()],
        }
    }
}

/// Sees the input rows (`n × width`, row-major) of each linear layer during a forward pass.
pub trait Observer {
    fn observe(&mut self, layer: usize, site: Site, rows: &[f32]);
}
