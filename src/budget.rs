//! What each tensor's storage type costs the model, measured: the input of the size-budget
//! search (`pocket export --size`, `--bpw`; the choice itself is `pocket_formats::budget`).
//!
//! For every weight matrix, the model is run over the calibration tokens with that matrix
//! alone stored at its smallest candidate type (quantized with the writer's own search and
//! read back), and the mean KL divergence of its next-token distributions from the unchanged
//! model's is that tensor's measured sensitivity. The other candidate types are priced from it
//! by their activation-weighted squared error (the layer's output error), to which the KL is
//! proportional for small errors: one forward pass per tensor instead of one per type.

use crate::loader::LoadedModel;
use crate::model::{Logits, Model};
use crate::weights::Matrix;
use crate::Error;
use pocket_formats::budget::{roundtrip, weighted_error, Choice, TensorChoices};
use pocket_formats::bytes::ByteView;
use pocket_formats::convert::Importance;
use pocket_formats::gguf::GgmlType;
use pocket_formats::quant::search::Method;
use pocket_formats::quant::QuantType;

/// The storage types the search chooses from by default: everything the kernels run fast,
/// from 4.125 to 8.25 bits per weight (ggml's Q5_0 and Q5_1, at 5.5 and 6, run on the packed
/// Q4 kernels with a fifth-bit plane; IQ4_NL and IQ4_XS, a non-uniform 4-bit grid at 4.5 and
/// 4.25 (IQ4_XS only where rows are a multiple of 256), on the same kernels with one table
/// lookup per 64 codes).
pub const CANDIDATES: [QuantType; 11] = [
    QuantType::Q4 {
        block: 128,
        sym: true,
    },
    QuantType::Q4 {
        block: 128,
        sym: false,
    },
    QuantType::Q4 {
        block: 64,
        sym: true,
    },
    QuantType::Q4 {
        block: 64,
        sym: false,
    },
    QuantType::Q4 {
        block: 32,
        sym: true,
    },
    QuantType::Q4 {
        block: 32,
        sym: false,
    },
    QuantType::Ggml(GgmlType::IQ4XS),
    QuantType::Ggml(GgmlType::IQ4NL),
    QuantType::Ggml(GgmlType::Q5_0),
    QuantType::Ggml(GgmlType::Q5_1),
    QuantType::Q8 { block: 64 },
];

/// One tensor to price: its name and `[rows, cols]`.
pub struct Target {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
}

/// Whether `name` is a weight matrix the engine holds (a linear layer, the embedding or the
/// output head): the tensors a size budget chooses types for.
pub fn is_weight_matrix(name: &str) -> bool {
    if matches!(name, "model.embed_tokens.weight" | "lm_head.weight") {
        return true;
    }
    let Some((i, rest)) = name
        .strip_prefix("model.layers.")
        .and_then(|r| r.split_once('.'))
    else {
        return false;
    };
    i.parse::<usize>().is_ok()
        && matches!(
            rest,
            "self_attn.q_proj.weight"
                | "self_attn.k_proj.weight"
                | "self_attn.v_proj.weight"
                | "self_attn.o_proj.weight"
                | "mlp.gate_proj.weight"
                | "mlp.up_proj.weight"
                | "mlp.down_proj.weight"
        )
}

/// The matrix `name` (an HF weight name) of `model`, if it is one the model holds.
fn slot<'a>(model: &'a mut Model, name: &str) -> Option<&'a mut Matrix> {
    match name {
        "model.embed_tokens.weight" => return Some(&mut model.embed_tokens),
        "lm_head.weight" => return model.lm_head.as_mut(),
        _ => {}
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (i, rest) = rest.split_once('.')?;
    let l = model.layers.get_mut(i.parse::<usize>().ok()?)?;
    Some(match rest {
        "self_attn.q_proj.weight" => &mut l.q_proj.weight,
        "self_attn.k_proj.weight" => &mut l.k_proj.weight,
        "self_attn.v_proj.weight" => &mut l.v_proj.weight,
        "self_attn.o_proj.weight" => &mut l.o_proj.weight,
        "mlp.gate_proj.weight" => &mut l.gate_proj.weight,
        "mlp.up_proj.weight" => &mut l.up_proj.weight,
        "mlp.down_proj.weight" => &mut l.down_proj.weight,
        _ => return None,
    })
}

/// Each row of `logits` (`n × vocab`) turned into log-probabilities, in place.
fn log_softmax(logits: &mut [f32], vocab: usize) {
    for row in logits.chunks_exact_mut(vocab) {
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
        let lse = max + sum.ln() as f32;
        row.iter_mut().for_each(|x| *x -= lse);
    }
}

/// Mean over rows of KL(reference ‖ other), both given as log-probabilities.
fn mean_kl(reference: &[f32], other: &[f32], vocab: usize) -> f64 {
    let rows = reference.len() / vocab;
    let total: f64 = reference
        .chunks_exact(vocab)
        .zip(other.chunks_exact(vocab))
        .map(|(p, q)| {
            p.iter()
                .zip(q)
                .map(|(&lp, &lq)| (lp as f64).exp() * (lp - lq) as f64)
                .sum::<f64>()
        })
        .sum();
    (total / rows.max(1) as f64).max(0.0)
}

fn log_probs(m: &Model, tokens: &[u32]) -> Result<Vec<f32>, Error> {
    let mut state = m.new_state(tokens.len());
    let mut out = m.forward_batch(&mut state, tokens, Logits::All)?;
    log_softmax(&mut out, m.spec.vocab_size);
    Ok(out)
}

/// The first layer whose output a change of the matrix `name` can move: its own layer's, the
/// number of layers for an untied output head (only the head runs), `None` for the embedding
/// (the whole pass).
fn first_changed(name: &str, layers: usize) -> Option<usize> {
    if name == "lm_head.weight" {
        return Some(layers);
    }
    let (i, _) = name.strip_prefix("model.layers.")?.split_once('.')?;
    i.parse().ok()
}

/// The log-probabilities of `tokens` with one matrix changed: entering at the first layer it
/// can move, from the unchanged model's stream there (`streams`), which gives a whole pass's
/// logits bit for bit.
fn probe_log_probs(
    m: &Model,
    tokens: &[u32],
    name: &str,
    streams: &[Vec<f32>],
) -> Result<Vec<f32>, Error> {
    let Some(layer) = first_changed(name, m.layers.len()) else {
        return log_probs(m, tokens);
    };
    let mut out = m.forward_entering(tokens, layer, &streams[layer])?;
    log_softmax(&mut out, m.spec.vocab_size);
    Ok(out)
}

/// The choices of every target: each candidate type that fits its shape, with its size and
/// its estimated cost (KL added) on `tokens`. `progress(done, total, name)` after each tensor.
pub fn price(
    m: &mut LoadedModel,
    targets: &[Target],
    candidates: &[QuantType],
    method: Method,
    importance: &Importance,
    tokens: &[u32],
    progress: &dyn Fn(usize, usize, &str),
) -> Result<Vec<TensorChoices>, Error> {
    let vocab = m.model.spec.vocab_size;
    let config = m.model.config;
    // The unchanged model's log-probabilities, and its residual stream entering each layer:
    // a probe runs only the layers from its matrix's up.
    let (mut reference, streams) = m.model.forward_recorded(tokens)?;
    log_softmax(&mut reference, vocab);
    let mut out = Vec::with_capacity(targets.len());
    for (k, t) in targets.iter().enumerate() {
        let values = m.file.read_f32(&t.name)?;
        if values.len() != t.rows * t.cols {
            return Err(Error::Invalid(format!(
                "tensor `{}`: {} values for a [{}, {}] matrix",
                t.name,
                values.len(),
                t.rows,
                t.cols
            )));
        }
        let imp = importance.get(&t.name).map(|v| v.as_slice());
        // Every fitting candidate, read back, with its weighted error.
        let mut priced: Vec<(QuantType, u64, f64, Vec<f32>)> = Vec::new();
        for &dtype in candidates {
            let Some(bytes) = dtype.byte_size(t.rows, t.cols) else {
                continue;
            };
            let Some(back) = roundtrip(&values, t.rows, t.cols, dtype, method, imp) else {
                continue;
            };
            let err = weighted_error(&values, &back, t.cols, imp);
            priced.push((dtype, bytes as u64, err, back));
        }
        if priced.is_empty() {
            return Err(Error::Invalid(format!(
                "tensor `{}` ([{}, {}]) fits none of the candidate types",
                t.name, t.rows, t.cols
            )));
        }
        // The probe: the candidate with the largest error, measured through the model.
        let probe = (0..priced.len())
            .max_by(|&a, &b| priced[a].2.total_cmp(&priced[b].2))
            .expect("not empty");
        let back = std::mem::take(&mut priced[probe].3);
        let bytes: Vec<u8> = back.iter().flat_map(|x| x.to_le_bytes()).collect();
        let view = ByteView::from_bytes(&bytes)
            .map_err(|e| Error::Invalid(format!("tensor `{}`: {e}", t.name)))?;
        let probe_matrix = Matrix::new(&t.name, t.rows, t.cols, QuantType::F32, view, config)?;
        let Some(place) = slot(&mut m.model, &t.name) else {
            return Err(Error::Invalid(format!(
                "tensor `{}` is not a weight matrix of the model",
                t.name
            )));
        };
        let original = std::mem::replace(place, probe_matrix);
        let measured = probe_log_probs(&m.model, tokens, &t.name, &streams);
        // Put the model back before anything else, whatever the pass returned.
        *slot(&mut m.model, &t.name).expect("found above") = original;
        let kl = mean_kl(&reference, &measured?, vocab);
        let probe_err = priced[probe].2;
        let choices = priced
            .iter()
            .map(|(dtype, bytes, err, _)| Choice {
                dtype: *dtype,
                bytes: *bytes,
                cost: if probe_err > 0.0 {
                    kl * err / probe_err
                } else {
                    0.0
                },
            })
            .collect();
        out.push(TensorChoices {
            name: t.name.clone(),
            choices,
        });
        progress(k + 1, targets.len(), &t.name);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn kl_of_a_distribution_with_itself_is_zero_and_grows_apart() {
        let mut a = vec![1.0f32, 2.0, 3.0, 0.5, 0.0, -1.0];
        let mut b = vec![1.0f32, 2.0, 3.5, 0.5, 0.0, -1.0];
        super::log_softmax(&mut a, 3);
        super::log_softmax(&mut b, 3);
        assert!(super::mean_kl(&a, &a, 3) < 1e-12);
        let kl = super::mean_kl(&a, &b, 3);
        // Row 0: p = softmax(1,2,3), q = softmax(1,2,3.5); row 1 equal.
        let p = [1f64, 2.0, 3.0].map(|x| x.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp()));
        let zq = 1f64.exp() + 2f64.exp() + 3.5f64.exp();
        let q = [1f64.exp() / zq, 2f64.exp() / zq, 3.5f64.exp() / zq];
        let want = (0..3).map(|i| p[i] * (p[i] / q[i]).ln()).sum::<f64>() / 2.0;
        assert!((kl - want).abs() < 1e-6, "{kl} vs {want}");
    }
}
