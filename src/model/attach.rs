//! Adapters met with a base: [`Model::open_adapter`] checks a LoRA file against this model's
//! layers and lays its factors out for the kernels each layer runs (the `lora` module holds
//! the adapter types; the model reads them, never the other way round).

use super::Model;
use crate::lora::{Adapter, LowRank, Target};
use crate::Error;
use pocket_formats::lora::LoraAdapter;
use std::path::Path;

impl Model {
    /// Reads an adapter file and checks it against this base.
    pub fn open_adapter(&self, path: &Path, name: &str) -> Result<Adapter, Error> {
        let file = pocket_formats::lora::open(path)?;
        self.attach_adapter(&file, name)
    }

    /// A file's adapter checked against this base: every target must be one of its weights,
    /// of its shape, and laid out for the kernels its layer runs.
    pub fn attach_adapter(&self, f: &LoraAdapter, name: &str) -> Result<Adapter, Error> {
        let model = self;
        let s = &model.spec;
        let path = f.path.display();
        if let Some(arch) = &f.architecture {
            if pocket_formats::hf::Family::from_model_type(arch) != Some(s.family) {
                return Err(Error::Invalid(format!(
                    "{path}: an adapter for a {arch} model; the base is {}",
                    s.family.as_str()
                )));
            }
        }
        let mut new_head = None;
        for r in &f.replaced {
            if r.target != "lm_head.weight" {
                return Err(Error::Invalid(format!(
                    "{path}: replaces {} whole (modules_to_save); pocket runs adapters of linear \
                     layers and embeddings, and new output heads (merge this one into the base \
                     first)",
                    r.target
                )));
            }
            if r.shape != [s.vocab_size, s.hidden_size] {
                return Err(Error::Invalid(format!(
                    "{path}: module lm_head.weight: the adapter's new head is {:?}; the base's is \
                     [{}, {}]",
                    r.shape, s.vocab_size, s.hidden_size
                )));
            }
            let bytes: Vec<u8> = r.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let view = pocket_formats::bytes::ByteView::from_bytes(&bytes)
                .map_err(|e| Error::Invalid(format!("{path}: {e}")))?;
            new_head = Some(crate::weights::Matrix::new(
                "lm_head.weight (adapter)",
                s.vocab_size,
                s.hidden_size,
                pocket_formats::quant::QuantType::F32,
                view,
                model.config,
            )?);
        }
        let mut layers: Vec<[Option<LowRank>; 7]> =
            (0..s.num_layers).map(|_| Default::default()).collect();
        let mut embed = None;
        let mut head = None;
        let mut ranks = Vec::new();
        for m in &f.modules {
            let shape = |what: &str, want: (usize, usize)| -> Result<(), Error> {
                let got = if m.embedding {
                    (m.cols, m.rows)
                } else {
                    (m.rows, m.cols)
                };
                if got != want {
                    return Err(Error::Invalid(format!(
                        "{path}: module {}: the adapter's {what} is [{}, {}]; the base's is [{}, {}]",
                        m.target, got.0, got.1, want.0, want.1
                    )));
                }
                Ok(())
            };
            ranks.push(m.rank);
            if m.target == "model.embed_tokens.weight" {
                if !m.embedding {
                    return Err(Error::Invalid(format!(
                        "{path}: module {}: a linear LoRA on the embedding",
                        m.target
                    )));
                }
                shape("embedding", (s.vocab_size, s.hidden_size))?;
                embed = Some(LowRank::from_module(m, s.head_dim));
                continue;
            }
            if m.target == "lm_head.weight" {
                shape("output head", (s.vocab_size, s.hidden_size))?;
                head = Some(LowRank::from_module(m, s.head_dim));
                continue;
            }
            let found = (0..s.num_layers).find_map(|l| {
                Target::ALL
                    .iter()
                    .position(|t| m.target == format!("model.layers.{l}.{}.weight", t.module()))
                    .map(|t| (l, t))
            });
            let Some((l, t)) = found else {
                return Err(Error::Invalid(format!(
                    "{path}: module {} is not a linear layer of this {} base ({} layers)",
                    m.target,
                    s.family.as_str(),
                    s.num_layers
                )));
            };
            let w = &model.layers[l].linears()[t].weight;
            shape("weight", (w.rows, w.cols))?;
            let mut lr = LowRank::from_module(m, s.head_dim);
            if w.quantizes_activations() {
                lr.a.halve();
                lr.bt.halve();
            }
            layers[l][t] = Some(lr);
        }
        Ok(Adapter {
            name: name.to_string(),
            path: f.path.clone(),
            modules: f.modules.len(),
            layers,
            embed,
            head,
            new_head,
            ranks,
            source: f.source.name(),
            alpha: f.alpha,
            rslora: f.rslora,
        })
    }
}
