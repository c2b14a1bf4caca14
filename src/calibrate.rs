//! Calibration for quantization: run the full-precision model over some text and record, for
//! every linear layer, the mean squared activation of each input column. The Q4 search then
//! weights each weight's error by how strongly its column is driven, so it minimises the error
//! of the layer's output rather than of the weights (the idea behind llama.cpp's imatrix and
//! AWQ).

use crate::chat_template::Message;
use crate::loader::LoadedModel;
use crate::model::{Observer, Site};
use crate::Error;
use std::collections::HashMap;

/// Text used when the user gives none: mixed prose, dialogue, instructions, arithmetic, code
/// and a little Chinese and JSON, written for pocket (no benchmark text, so evaluations on
/// GSM8K/IFEval stay clean).
pub const BUILTIN_TEXT: &str = include_str!("calibration.txt");

/// Σx² per column and the row count, per (layer, site).
struct SquareSums {
    sums: HashMap<(usize, SiteKey), (Vec<f64>, usize)>,
}

type SiteKey = u8;

fn key(site: Site) -> SiteKey {
    match site {
        Site::AttnIn => 0,
        Site::AttnOut => 1,
        Site::MlpIn => 2,
        Site::MlpDown => 3,
        Site::Head => 4,
    }
}

const SITES: [Site; 5] = [
    Site::AttnIn,
    Site::AttnOut,
    Site::MlpIn,
    Site::MlpDown,
    Site::Head,
];

/// Which width each site's rows have.
fn width(m: &LoadedModel, site: Site) -> usize {
    let s = m.model.spec.clone();
    match site {
        Site::AttnOut => s.num_heads * s.head_dim,
        Site::MlpDown => s.intermediate_size,
        _ => s.hidden_size,
    }
}

struct Collector<'a> {
    sums: &'a mut SquareSums,
    widths: [usize; 5],
    /// The whole `Σ xᵀx` too, for GPTQ (`--gptq`).
    grams: Option<&'a mut crate::gram::GramSums>,
}

impl Observer for Collector<'_> {
    fn observe(&mut self, layer: usize, site: Site, rows: &[f32]) {
        let w = self.widths[key(site) as usize];
        if let Some(g) = self.grams.as_deref_mut() {
            g.add(layer, key(site), w, rows);
        }
        let (acc, n) = self
            .sums
            .sums
            .entry((layer, key(site)))
            .or_insert_with(|| (vec![0.0; w], 0));
        for row in rows.chunks_exact(w) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v as f64 * v as f64;
            }
            *n += 1;
        }
    }
}

/// The dialogues of `text` (`User:` lines answered by `Assistant:` lines) rendered through
/// the model's chat template, so the special tokens and the assistant turns a chat model sees
/// in use are calibrated too; then the text itself as plain text. Each gets up to half of
/// `max_tokens` (the text takes what the dialogues leave).
pub fn calibration_tokens(
    m: &LoadedModel,
    text: &str,
    max_tokens: usize,
) -> Result<Vec<u32>, Error> {
    let mut chat = Vec::new();
    if m.template.is_some() {
        for (user, answer) in dialogues(text) {
            let messages = [
                Message::new("user", &user),
                Message::new("assistant", &answer),
            ];
            chat.extend(m.encode_chat(&messages, false)?);
            if chat.len() >= max_tokens / 2 {
                break;
            }
        }
        chat.truncate(max_tokens / 2);
    }
    let mut plain = m.tokenizer.encode(text, true)?;
    plain.truncate(max_tokens - chat.len());
    chat.extend(plain);
    if chat.is_empty() {
        return Err(Error::Invalid("calibration text has no tokens".into()));
    }
    Ok(chat)
}

/// `(user, assistant)` pairs: a paragraph starting `User: ` followed by one starting
/// `Assistant: ` (an answer runs to the next blank line).
fn dialogues(text: &str) -> Vec<(String, String)> {
    let paragraphs: Vec<&str> = text.split("\n\n").collect();
    let mut out = Vec::new();
    for p in paragraphs {
        if let Some(rest) = p.strip_prefix("User: ") {
            if let Some((u, a)) = rest.split_once("\nAssistant: ") {
                out.push((u.trim().to_string(), a.trim().to_string()));
            }
        }
    }
    out
}

/// What a calibration run saw.
pub struct Calibration {
    /// Mean squared activation per input column, by weight name.
    pub importance: HashMap<String, Vec<f32>>,
    /// GPTQ's compensation per weight name, when asked for (weights sharing an input share
    /// one).
    pub compensation: HashMap<String, std::sync::Arc<pocket_formats::quant::gptq::Compensation>>,
    pub tokens: usize,
}

/// Runs the model over `text` in chunks of at most `chunk` tokens (each chunk a fresh context,
/// starting with the tokenizer's special prefix) up to `max_tokens` tokens in all; with
/// `gptq`, also each input's Gram matrix, factored for GPTQ.
pub fn calibrate(
    m: &LoadedModel,
    text: &str,
    max_tokens: usize,
    chunk: usize,
    gptq: bool,
    progress: &dyn Fn(usize, usize),
) -> Result<Calibration, Error> {
    let ids = calibration_tokens(m, text, max_tokens)?;
    let chunk = chunk.clamp(1, m.model.spec.max_position_embeddings.max(1));
    let mut sums = SquareSums {
        sums: HashMap::new(),
    };
    let widths = SITES.map(|s| width(m, s));
    let mut grams = gptq.then(crate::gram::GramSums::default);
    let mut done = 0;
    for part in ids.chunks(chunk) {
        let mut state = m.model.new_state(part.len());
        let mut c = Collector {
            sums: &mut sums,
            widths,
            grams: grams.as_mut(),
        };
        m.model.forward_batch_observed(
            &mut state,
            part,
            crate::model::Logits::None,
            Some(&mut c),
        )?;
        done += part.len();
        progress(done, ids.len());
    }
    let tied = m.model.lm_head.is_none();
    let mut importance = HashMap::new();
    for ((layer, k), (acc, n)) in sums.sums {
        let site = SITES[k as usize];
        let mean: Vec<f32> = acc.iter().map(|&a| (a / n.max(1) as f64) as f32).collect();
        for name in site.weights(layer, tied) {
            importance.insert(name, mean.clone());
        }
    }
    let compensation = match grams {
        Some(g) => g.compensations(|k| SITES[k as usize], tied),
        None => HashMap::new(),
    };
    Ok(Calibration {
        importance,
        compensation,
        tokens: ids.len(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn dialogues_are_user_assistant_paragraphs() {
        let d = super::dialogues(super::BUILTIN_TEXT);
        assert!(d.len() >= 6, "{d:?}");
        assert!(d.iter().all(|(u, a)| !u.is_empty() && !a.is_empty()));
        let t = "User: hi\nAssistant: hello\nthere\n\nplain text\n\nUser: no answer";
        assert_eq!(
            super::dialogues(t),
            vec![("hi".to_string(), "hello\nthere".to_string())]
        );
    }
}
