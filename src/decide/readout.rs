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
    let mut st = model.state_with(from.cache.fork(from.cache.len() + extra));
    st.lora = from.lora.clone();
    st
}

/// One plan to read: its state (the cache holding the plan's shared tokens), the head for
/// marker and last-position readouts, and whether every variant's last hidden state is
/// wanted too (features for fitting a head).
pub struct Ask<'a> {
    pub state: &'a mut State,
    pub plan: &'a Plan,
    pub head: Option<&'a Head>,
    pub hidden: bool,
}

/// Runs `plan` over `state`, whose cache holds `plan.shared` positions (its prefix), and
/// leaves it holding just those.
pub fn evaluate(
    model: &Model,
    state: &mut State,
    plan: &Plan,
    head: Option<&Head>,
    hidden: bool,
) -> Result<Scores, Error> {
    let mut asks = [Ask {
        state,
        plan,
        head,
        hidden,
    }];
    Ok(evaluate_many(model, &mut asks)?.remove(0))
}

/// One variant of one ask, and the cache it runs in.
struct Item {
    ask: usize,
    variant: usize,
    /// Its own fork of the ask's state (`None`: the ask's one variant runs in the state).
    fork: Option<State>,
}

/// [`evaluate`] for several plans at once (a server's concurrent requests): every variant of
/// every ask in the same passes, so the weights are read once for all of them.
pub fn evaluate_many(model: &Model, asks: &mut [Ask]) -> Result<Vec<Scores>, Error> {
    for a in asks.iter() {
        if a.state.cache.len() != a.plan.shared {
            return Err(Error::Invalid(format!(
                "evaluate: the cache holds {} positions, the plan shares {}",
                a.state.cache.len(),
                a.plan.shared
            )));
        }
    }
    let (h, vocab) = (model.spec.hidden_size, model.spec.vocab_size);
    let mut out: Vec<Scores> = asks
        .iter()
        .map(|a| {
            let n = a.plan.variants.len();
            Scores {
                raw: vec![Vec::new(); n],
                hidden: vec![Vec::new(); if a.hidden { n } else { 0 }],
            }
        })
        .collect();
    let mut items: Vec<Item> = Vec::new();
    for (ai, a) in asks.iter().enumerate() {
        let n = a.plan.variants.len();
        for vi in 0..n {
            items.push(Item {
                ask: ai,
                variant: vi,
                fork: None,
            });
        }
    }
    let longest_key = |r: &Read| match r {
        Read::Keys(k) | Read::Tree(k) => k.iter().map(Vec::len).max().unwrap_or(0),
        _ => 0,
    };
    // Pass 1: every variant's own tokens.
    let n_items = items.len();
    for group in (0..n_items)
        .step_by(GROUP)
        .map(|g| g..(g + GROUP).min(n_items))
    {
        for it in &mut items[group.clone()] {
            let a = &asks[it.ask];
            if a.plan.variants.len() > 1 {
                let v = &a.plan.variants[it.variant];
                let extra = v.tokens.len() - a.plan.shared + longest_key(&v.read);
                it.fork = Some(copy_of(model, a.state, extra));
            }
        }
        let mut tokens = Vec::new();
        let mut lens = Vec::new();
        // Per item: its picked rows' range (markers, then the last row).
        let mut picked = Vec::new();
        let mut spans = Vec::new();
        let mut want_logits = false;
        for it in &items[group.clone()] {
            let plan = asks[it.ask].plan;
            let v = &plan.variants[it.variant];
            let p = plan.shared;
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
            want_logits |= matches!(v.read, Read::Labels(_) | Read::Keys(_));
        }
        let rows = {
            let in_place: Vec<usize> = items[group.clone()]
                .iter()
                .filter(|it| it.fork.is_none())
                .map(|it| it.ask)
                .collect();
            let mut shared: Vec<Option<&mut State>> = asks
                .iter_mut()
                .enumerate()
                .map(|(i, a)| in_place.contains(&i).then_some(&mut *a.state))
                .collect();
            let mut refs: Vec<&mut State> = Vec::with_capacity(lens.len());
            for it in &mut items[group.clone()] {
                match it.fork.as_mut() {
                    Some(f) => refs.push(f),
                    None => refs.push(shared[it.ask].take().expect("one variant per ask")),
                }
            }
            model.forward_picked(&mut refs, &tokens, &lens, &picked, want_logits)?
        };
        for (j, it) in items[group.clone()].iter().enumerate() {
            let a = &asks[it.ask];
            let v = &a.plan.variants[it.variant];
            let (first, end) = spans[j];
            let last = end - 1;
            let hid = |r: usize| &rows.hidden[r * h..(r + 1) * h];
            let logits = |r: usize| &rows.logits[r * vocab..(r + 1) * vocab];
            let o = &mut out[it.ask];
            if a.hidden {
                o.hidden[it.variant] = hid(last).to_vec();
            }
            o.raw[it.variant] = match &v.read {
                Read::Labels(groups) => groups
                    .iter()
                    .map(|g| logsumexp(g.iter().map(|&id| logits(last)[id as usize] as f64)))
                    .collect(),
                Read::Keys(keys) => keys.iter().map(|k| log_prob(logits(last), k[0])).collect(),
                Read::Tree(keys) => {
                    let mut s = vec![0.0; keys.len()];
                    if let Some(root) = branches(keys).into_iter().find(|b| b.path.is_empty()) {
                        root.add(
                            &mut s,
                            &model.logits_of(hid(last), &root.tokens(), lora_of(a.state)),
                        );
                    }
                    s
                }
                Read::Markers(_) => {
                    let head = need_head(a.head, "a pointer readout")?;
                    let markers: Vec<&[f32]> = (first..last).map(hid).collect();
                    head.pointer_scores(hid(last), &markers)?
                }
                Read::Last(keys) => {
                    need_head(a.head, "a probe readout")?.probe_scores(hid(last), keys)?
                }
            };
        }
        // Forks of variants without a second pass are dropped now (their memory back).
        for it in &mut items[group] {
            let v = &asks[it.ask].plan.variants[it.variant];
            if !matches!(v.read, Read::Keys(_) | Read::Tree(_)) {
                it.fork = None;
            }
        }
    }
    // Pass 2: the rest of each key after its first token, continuing its variant's cache.
    let mut jobs: Vec<(usize, usize)> = Vec::new();
    for (ii, it) in items.iter().enumerate() {
        if let Read::Keys(keys) = &asks[it.ask].plan.variants[it.variant].read {
            jobs.extend(
                (0..keys.len())
                    .filter(|&i| keys[i].len() > 1)
                    .map(|i| (ii, i)),
            );
        }
    }
    for chunk in jobs.chunks(GROUP) {
        let mut states = Vec::with_capacity(chunk.len());
        let (mut tokens, mut lens) = (Vec::new(), Vec::new());
        for &(ii, i) in chunk {
            let it = &items[ii];
            let Read::Keys(keys) = &asks[it.ask].plan.variants[it.variant].read else {
                unreachable!("keys jobs")
            };
            let src = match it.fork.as_ref() {
                Some(s) => s,
                None => &*asks[it.ask].state,
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
        for &(ii, i) in chunk {
            let it = &items[ii];
            let Read::Keys(keys) = &asks[it.ask].plan.variants[it.variant].read else {
                unreachable!("keys jobs")
            };
            for &next in &keys[i][1..] {
                out[it.ask].raw[it.variant][i] +=
                    log_prob(&rows.logits[r * vocab..(r + 1) * vocab], next);
                r += 1;
            }
        }
    }
    // Pass 3 (constrained): where options that share a beginning part, the softmax over
    // their next tokens after it.
    let mut parts: Vec<(usize, Branch)> = Vec::new();
    for (ii, it) in items.iter().enumerate() {
        if let Read::Tree(keys) = &asks[it.ask].plan.variants[it.variant].read {
            parts.extend(
                branches(keys)
                    .into_iter()
                    .filter(|b| !b.path.is_empty())
                    .map(|b| (ii, b)),
            );
        }
    }
    for chunk in parts.chunks(GROUP) {
        let mut states = Vec::with_capacity(chunk.len());
        let (mut tokens, mut lens, mut picked) = (Vec::new(), Vec::new(), Vec::new());
        for (ii, b) in chunk {
            let it = &items[*ii];
            let src = match it.fork.as_ref() {
                Some(s) => s,
                None => &*asks[it.ask].state,
            };
            states.push(copy_of(model, src, b.path.len()));
            tokens.extend_from_slice(&b.path);
            lens.push(b.path.len());
            picked.push(tokens.len() - 1);
        }
        let rows = {
            let mut refs: Vec<&mut State> = states.iter_mut().collect();
            model.forward_picked(&mut refs, &tokens, &lens, &picked, false)?
        };
        for (j, (ii, b)) in chunk.iter().enumerate() {
            let it = &items[*ii];
            let hidden = &rows.hidden[j * h..(j + 1) * h];
            b.add(
                &mut out[it.ask].raw[it.variant],
                &model.logits_of(hidden, &b.tokens(), states[j].lora.as_deref()),
            );
        }
    }
    for a in asks.iter_mut() {
        a.state.cache.truncate(a.plan.shared);
    }
    Ok(out)
}

/// A place where options' answer paths part: the tokens before it, and each next token with
/// the options that take it.
#[derive(Debug, PartialEq)]
struct Branch {
    path: Vec<u32>,
    children: Vec<(u32, Vec<usize>)>,
}

impl Branch {
    fn tokens(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.0).collect()
    }

    /// Adds each child's log-softmax (over the children's `logits`) to its options' scores.
    fn add(&self, scores: &mut [f64], logits: &[f32]) {
        let lse = logsumexp(logits.iter().map(|&l| l as f64));
        for ((_, opts), &l) in self.children.iter().zip(logits) {
            for &o in opts {
                scores[o] += l as f64 - lse;
            }
        }
    }
}

/// Every place with two or more next tokens in the prefix tree of `keys` (an option whose
/// path ended there has no next token and keeps its score).
fn branches(keys: &[Vec<u32>]) -> Vec<Branch> {
    fn walk(keys: &[Vec<u32>], opts: &[usize], depth: usize, out: &mut Vec<Branch>) {
        let mut children: Vec<(u32, Vec<usize>)> = Vec::new();
        for &o in opts {
            if let Some(&t) = keys[o].get(depth) {
                match children.iter_mut().find(|c| c.0 == t) {
                    Some(c) => c.1.push(o),
                    None => children.push((t, vec![o])),
                }
            }
        }
        if children.len() > 1 {
            out.push(Branch {
                path: keys[opts[0]][..depth].to_vec(),
                children: children.clone(),
            });
        }
        for (_, sub) in &children {
            walk(keys, sub, depth + 1, out);
        }
    }
    let mut out = Vec::new();
    let all: Vec<usize> = (0..keys.len()).collect();
    walk(keys, &all, 0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_tree_parts_where_keys_differ() {
        // call+end, call_contact+end, cancel+end: "call" (1,2) and "cancel" (3) part at the
        // root; after "call" the end (9) and "_contact" (4) part.
        let keys = vec![vec![1, 2, 9], vec![1, 2, 4, 9], vec![3, 9]];
        let b = branches(&keys);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].path, Vec::<u32>::new());
        assert_eq!(b[0].children, vec![(1, vec![0, 1]), (3, vec![2])]);
        assert_eq!(b[1].path, vec![1, 2]);
        assert_eq!(b[1].children, vec![(9, vec![0]), (4, vec![1])]);
        let mut s = vec![0.0; 3];
        b[0].add(&mut s, &[0.0, 0.0]);
        b[1].add(&mut s, &[1.0, 1.0]);
        let p: Vec<f64> = s.iter().map(|x| x.exp()).collect();
        assert!(
            (p[0] - 0.25).abs() < 1e-12
                && (p[1] - 0.25).abs() < 1e-12
                && (p[2] - 0.5).abs() < 1e-12
        );
    }
}

/// The adapters a state runs with, if any.
fn lora_of(st: &State) -> Option<&crate::lora::AdapterSet> {
    st.lora.as_deref()
}

fn need_head<'h>(head: Option<&'h Head>, what: &str) -> Result<&'h Head, Error> {
    head.ok_or_else(|| Error::Invalid(format!("{what} needs a decision head (--head FILE)")))
}
