//! Reading a plan's scores off the model, with the shared tokens already in a state's cache.
//!
//! - **Pass 1:** every variant's own tokens as one sequence each, all in one forward pass over
//!   copies of the shared prefix (a single variant runs in the state itself): the last
//!   position's logits for label readouts, the marker and last positions' hidden states for
//!   heads. Weights are read once for all questions.
//! - **Pass 2 (keys):** every option's answer tokens as one sequence each, over copies of its
//!   question's cache, in one pass: each option's log-likelihood.
//!
//! Scores are raw: label logits (their log-sum-exp over a label's spellings), key
//! log-likelihoods, head outputs. [`super::answer`] turns them into probabilities.

use super::head::Head;
use super::render::{Plan, Read};
use crate::model::{Model, State};
use crate::Error;

/// Sequences per forward pass: each is a copy of a cache, so this bounds the copies' memory.
const GROUP: usize = 16;

/// What one plan's passes gave.
#[derive(Clone, Debug, Default)]
pub struct Scores {
    /// Per variant, one raw score per option in shown order.
    pub raw: Vec<Vec<f64>>,
    /// Per variant, the hidden state at its last position (features for fitting a head),
    /// when asked for.
    pub hidden: Vec<Vec<f32>>,
}

/// `log Σ exp` of the picked logits.
fn logsumexp(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// `log softmax(row)[id]`, in f64.
fn log_prob(row: &[f32], id: u32) -> f64 {
    let lse = logsumexp(row.iter().map(|&x| x as f64));
    row[id as usize] as f64 - lse
}

/// A fresh state holding everything `from` holds, with room for `extra` more positions.
fn copy_of(model: &Model, from: &State, extra: usize) -> State {
    model.state_with(from.cache.fork(from.cache.len() + extra))
}

/// Runs `plan` over `state`, whose cache holds `plan.shared` positions (its prefix), and
/// leaves it holding just those. `head` scores marker and last-position readouts; `hidden`
/// asks for every variant's last hidden state too.
pub fn evaluate(
    model: &Model,
    state: &mut State,
    plan: &Plan,
    head: Option<&Head>,
    hidden: bool,
) -> Result<Scores, Error> {
    let p = plan.shared;
    if state.cache.len() != p {
        return Err(Error::Invalid(format!(
            "evaluate: the cache holds {} positions, the plan shares {p}",
            state.cache.len()
        )));
    }
    let (h, vocab) = (model.spec.hidden_size, model.spec.vocab_size);
    let n = plan.variants.len();
    let mut out = Scores {
        raw: vec![Vec::new(); n],
        hidden: vec![Vec::new(); if hidden { n } else { 0 }],
    };
    // Keys readouts continue from their question's cache in pass 2.
    let mut kept: Vec<Option<State>> = (0..n).map(|_| None).collect();
    let one = n == 1;
    let starts: Vec<usize> = (0..n).step_by(GROUP).collect();
    for &g0 in &starts {
        let group = g0..(g0 + GROUP).min(n);
        let vs = &plan.variants[group.clone()];
        let longest_key = |r: &Read| match r {
            Read::Keys(k) => k.iter().map(Vec::len).max().unwrap_or(0),
            _ => 0,
        };
        let mut own: Vec<State> = Vec::new();
        if !one {
            for v in vs {
                let extra = v.tokens.len() - p + longest_key(&v.read);
                own.push(copy_of(model, state, extra));
            }
        }
        let mut tokens = Vec::new();
        let mut lens = Vec::new();
        // Per variant: the picked rows' range, and the index of its last row among them.
        let mut picked = Vec::new();
        let mut spans = Vec::new();
        for v in vs {
            let base = tokens.len();
            let suffix = &v.tokens[p..];
            tokens.extend_from_slice(suffix);
            lens.push(suffix.len());
            let first = picked.len();
            if let Read::Markers(m) = &v.read {
                picked.extend(m.iter().map(|&pos| base + pos - p));
            }
            picked.push(base + suffix.len() - 1);
            spans.push((first, picked.len()));
        }
        let want_logits = vs
            .iter()
            .any(|v| matches!(v.read, Read::Labels(_) | Read::Keys(_)));
        let rows = {
            let mut refs: Vec<&mut State> = if one {
                vec![&mut *state]
            } else {
                own.iter_mut().collect()
            };
            model.forward_picked(&mut refs, &tokens, &lens, &picked, want_logits)?
        };
        for (j, v) in vs.iter().enumerate() {
            let vi = group.start + j;
            let (a, b) = spans[j];
            let last = b - 1;
            let hid = |r: usize| &rows.hidden[r * h..(r + 1) * h];
            let logits = |r: usize| &rows.logits[r * vocab..(r + 1) * vocab];
            if hidden {
                out.hidden[vi] = hid(last).to_vec();
            }
            out.raw[vi] = match &v.read {
                Read::Labels(groups) => groups
                    .iter()
                    .map(|g| logsumexp(g.iter().map(|&id| logits(last)[id as usize] as f64)))
                    .collect(),
                Read::Keys(keys) => keys.iter().map(|k| log_prob(logits(last), k[0])).collect(),
                Read::Markers(_) => {
                    let head = need_head(head, "a pointer readout")?;
                    let markers: Vec<&[f32]> = (a..last).map(hid).collect();
                    head.pointer_scores(hid(last), &markers)?
                }
                Read::Last(keys) => {
                    need_head(head, "a probe readout")?.probe_scores(hid(last), keys)?
                }
            };
        }
        if !one {
            for (j, st) in own.into_iter().enumerate() {
                if matches!(vs[j].read, Read::Keys(_)) {
                    kept[group.start + j] = Some(st);
                }
            }
        }
    }
    // Pass 2: the rest of each key after its first token.
    let mut jobs: Vec<(usize, usize)> = Vec::new();
    for (vi, v) in plan.variants.iter().enumerate() {
        if let Read::Keys(keys) = &v.read {
            jobs.extend(
                (0..keys.len())
                    .filter(|&i| keys[i].len() > 1)
                    .map(|i| (vi, i)),
            );
        }
    }
    for chunk in jobs.chunks(GROUP) {
        let mut states = Vec::with_capacity(chunk.len());
        let (mut tokens, mut lens) = (Vec::new(), Vec::new());
        for &(vi, i) in chunk {
            let v = &plan.variants[vi];
            let Read::Keys(keys) = &v.read else {
                unreachable!("keys jobs")
            };
            let src = match kept[vi].as_ref() {
                Some(s) => s,
                None => &*state,
            };
            let k = &keys[i];
            states.push(copy_of(model, src, k.len()));
            tokens.extend_from_slice(&k[..k.len() - 1]);
            lens.push(k.len() - 1);
        }
        let picked: Vec<usize> = (0..tokens.len()).collect();
        let rows = {
            let mut refs: Vec<&mut State> = states.iter_mut().collect();
            model.forward_picked(&mut refs, &tokens, &lens, &picked, true)?
        };
        let mut r = 0;
        for &(vi, i) in chunk {
            let Read::Keys(keys) = &plan.variants[vi].read else {
                unreachable!("keys jobs")
            };
            let k = &keys[i];
            for &next in &k[1..] {
                out.raw[vi][i] += log_prob(&rows.logits[r * vocab..(r + 1) * vocab], next);
                r += 1;
            }
        }
    }
    state.cache.truncate(p);
    Ok(out)
}

fn need_head<'h>(head: Option<&'h Head>, what: &str) -> Result<&'h Head, Error> {
    head.ok_or_else(|| Error::Invalid(format!("{what} needs a decision head (--head FILE)")))
}
