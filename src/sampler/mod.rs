//! Choosing the next token from logits: repetition penalties, then greedy at temperature 0 or
//! temperature, top-k, top-p and min-p filtering and a seeded draw, so the same seed and
//! settings reproduce the same text.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

mod defaults;
mod draw;

/// Sampling settings. Serialized with a saved chat, so field names are part of that format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerConfig {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: usize,
    /// 1.0 disables top-p.
    pub top_p: f32,
    /// 0.0 disables min-p.
    pub min_p: f32,
    /// llama.cpp's `repeat_penalty`: a token seen in the window has its logit divided by this
    /// when positive and multiplied when negative, so it always becomes less likely. 1.0: off.
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every token seen in the window (OpenAI's
    /// `presence_penalty`). 0.0: off.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it occurs in the window (OpenAI's
    /// `frequency_penalty`). 0.0: off.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens (prompt and answer) the penalties look at, as
    /// llama.cpp's `repeat_last_n`. 0: no window, penalties off.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Checks the ranges a user can get wrong; the message names the setting as the CLI does.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err("temp must be a finite number >= 0".into());
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err("top-p must be in (0, 1]".into());
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err("min-p must be in [0, 1]".into());
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return Err("repeat-penalty must be a finite number > 0 (1 is off)".into());
        }
        if !(self.presence_penalty.is_finite() && self.frequency_penalty.is_finite()) {
            return Err("presence-penalty and frequency-penalty must be finite numbers".into());
        }
        Ok(())
    }

    fn penalties_on(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
    candidates: Vec<(u32, f32)>,
    buffers: draw::Buffers,
    /// The last `repeat_last_n` tokens of the sequence, oldest first, for the penalties.
    recent: VecDeque<u32>,
    penalized: Vec<f32>,
}

/// A copy that draws what this sampler would draw next (the same settings, penalty window and
/// generator state); scratch buffers are not copied.
impl Clone for Sampler {
    fn clone(&self) -> Sampler {
        Sampler {
            config: self.config.clone(),
            rng: self.rng.clone(),
            candidates: Vec::new(),
            buffers: draw::Buffers::default(),
            recent: self.recent.clone(),
            penalized: Vec::new(),
        }
    }
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        Sampler {
            rng: Rng::new(config.seed),
            config,
            candidates: Vec::new(),
            buffers: draw::Buffers::default(),
            recent: VecDeque::new(),
            penalized: Vec::new(),
        }
    }

    /// Records a token of the sequence (prompt or generated) for the repetition penalties.
    /// [`generate`](crate::generate::generate) calls it for every token it runs or samples.
    pub fn accept(&mut self, id: u32) {
        let n = self.config.repeat_last_n;
        if n == 0 {
            return;
        }
        while self.recent.len() >= n {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// Replaces the penalty window with the tail of `ids`: the tokens already in the KV cache
    /// when a chat turn reuses it, so the window matches a run from scratch.
    pub fn set_history(&mut self, ids: &[u32]) {
        self.recent.clear();
        let n = self.config.repeat_last_n;
        for &id in &ids[ids.len().saturating_sub(n)..] {
            self.accept(id);
        }
    }

    /// [`sample`](Self::sample) over the ids set in `allowed` (a bit set, 32 ids per word, as
    /// a grammar mask is stored), with the same penalties, filters and draw. Only allowed ids
    /// are read, so the mask costs no extra pass over the vocabulary: a JSON string's mask
    /// allows most ids, but a key or a number allows few. `None` when nothing is allowed.
    pub fn sample_allowed(&mut self, logits: &[f32], allowed: &[u32]) -> Option<u32> {
        let c = self.config.clone();
        let mut counts: Vec<(u32, u32)> = Vec::new();
        if c.penalties_on() {
            for &id in &self.recent {
                match counts.iter_mut().find(|(t, _)| *t == id) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((id, 1)),
                }
            }
        }
        let value = |id: u32| -> f32 {
            let l = logits[id as usize];
            match counts.iter().find(|(t, _)| *t == id) {
                Some(&(_, n)) => penalized(l, n, &c),
                None => l,
            }
        };
        let ids = set_ids(allowed, logits.len());
        if c.temperature <= 0.0 {
            // argmax: the first of equal maxima, as [`argmax`] picks.
            let mut best: Option<(u32, f32)> = None;
            for id in ids {
                let l = value(id);
                if best.is_none_or(|(_, b)| l > b) {
                    best = Some((id, l));
                }
            }
            return best.map(|(id, _)| id);
        }
        self.candidates.clear();
        self.candidates
            .extend(ids.map(|id| (id, value(id) / c.temperature)));
        if self.candidates.is_empty() {
            return None;
        }
        Some(self.draw())
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let logits = if self.config.penalties_on() {
            self.penalized.clear();
            self.penalized.extend_from_slice(logits);
            apply_penalties(&mut self.penalized, &self.recent, &self.config);
            &self.penalized[..]
        } else {
            logits
        };
        let c = &self.config;
        if c.temperature <= 0.0 {
            return argmax(logits);
        }
        let t = c.temperature;
        self.candidates.clear();
        self.candidates
            .extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l / t)));
        self.draw()
    }

    /// Top-k, min-p and top-p over `self.candidates` (id, logit / temperature), then the
    /// seeded draw.
    fn draw(&mut self) -> u32 {
        let u = self.rng.next_f64();
        draw::draw(&self.config, &mut self.candidates, &mut self.buffers, u)
    }
}

/// llama.cpp's penalties (`llama_sampler_penalties_apply`): for each distinct token in the
/// window, `repeat_penalty` pushes its logit towards "less likely" whatever its sign (dividing
/// a negative logit would raise it), then `count × frequency + presence` is subtracted.
fn apply_penalties(logits: &mut [f32], recent: &VecDeque<u32>, c: &SamplerConfig) {
    let mut counts: Vec<(u32, u32)> = Vec::with_capacity(recent.len());
    for &id in recent {
        match counts.iter_mut().find(|(t, _)| *t == id) {
            Some((_, n)) => *n += 1,
            None => counts.push((id, 1)),
        }
    }
    for (id, n) in counts {
        let Some(l) = logits.get_mut(id as usize) else {
            continue;
        };
        *l = penalized(*l, n, c);
    }
}

/// One logit after the penalties, for a token seen `n` times in the window.
fn penalized(l: f32, n: u32, c: &SamplerConfig) -> f32 {
    let l = if l <= 0.0 {
        l * c.repeat_penalty
    } else {
        l / c.repeat_penalty
    };
    l - (n as f32 * c.frequency_penalty + c.presence_penalty)
}

/// The ids below `len` whose bits are set, in increasing order; zero words are skipped whole.
fn set_ids(bits: &[u32], len: usize) -> impl Iterator<Item = u32> + '_ {
    bits.iter()
        .enumerate()
        .flat_map(move |(w, &word)| {
            let mut word = word;
            std::iter::from_fn(move || {
                if word == 0 {
                    return None;
                }
                let b = word.trailing_zeros();
                word &= word - 1;
                Some(w as u32 * 32 + b)
            })
        })
        .take_while(move |&id| (id as usize) < len)
}

/// Index of the largest logit; the first one on ties, as `torch.argmax` does.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// xoshiro256** seeded through splitmix64: small, fast, and the same on every platform.
#[derive(Clone)]
struct Rng([u64; 4]);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng([next(), next(), next(), next()])
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn greedy_takes_first_max() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        let mut s = Sampler::new(SamplerConfig::default());
        assert_eq!(s.sample(&[0.0, 0.5, 0.1]), 1);
    }

    #[test]
    fn same_seed_same_draws_and_filters_hold() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7919) % 13) as f32 * 0.3).collect();
        let cfg = SamplerConfig {
            temperature: 0.8,
            top_k: 5,
            top_p: 0.9,
            seed: 42,
            ..SamplerConfig::default()
        };
        let draw = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..200).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        let a = draw(&cfg);
        assert_eq!(a, draw(&cfg));
        assert_ne!(
            a,
            draw(&SamplerConfig {
                seed: 43,
                ..cfg.clone()
            })
        );
        // top-k 5: only the five best ids can ever appear.
        let mut order: Vec<u32> = (0..50).collect();
        order.sort_by(|&x, &y| {
            logits[y as usize]
                .total_cmp(&logits[x as usize])
                .then(x.cmp(&y))
        });
        assert!(a.iter().all(|id| order[..5].contains(id)));
        // top-p tiny keeps only the best token.
        let mut s = Sampler::new(SamplerConfig {
            top_p: 1e-6,
            top_k: 0,
            ..cfg
        });
        assert!((0..20).all(|_| s.sample(&logits) == order[0]));
    }

    fn window(cfg: SamplerConfig, history: &[u32]) -> Sampler {
        let mut s = Sampler::new(cfg);
        s.set_history(history);
        s
    }

    #[test]
    fn repeat_penalty_demotes_seen_tokens_whatever_their_sign() {
        // Token 0 leads; 1 is close behind. Both logits of 0 are pushed down: 2.0 / 2 = 1.0 and
        // -1.0 * 2 = -2.0.
        let cfg = SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::default()
        };
        assert_eq!(Sampler::new(cfg.clone()).sample(&[2.0, 1.5, 0.0]), 0);
        assert_eq!(window(cfg.clone(), &[0]).sample(&[2.0, 1.5, 0.0]), 1);
        let mut logits = vec![2.0, -1.0, 0.5];
        apply_penalties(&mut logits, &[0, 1].into_iter().collect(), &cfg);
        assert_eq!(logits, vec![1.0, -2.0, 0.5]);
        // A penalty below 1 rewards repetition instead (llama.cpp allows it).
        let reward = SamplerConfig {
            repeat_penalty: 0.5,
            ..SamplerConfig::default()
        };
        assert_eq!(window(reward, &[1]).sample(&[2.0, 1.5, 0.0]), 1);
    }

    #[test]
    fn presence_and_frequency_penalties_subtract() {
        let recent: VecDeque<u32> = [0, 0, 0, 1].into_iter().collect();
        let mut logits = vec![5.0, 5.0, 5.0];
        let cfg = SamplerConfig {
            presence_penalty: 0.5,
            frequency_penalty: 1.0,
            ..SamplerConfig::default()
        };
        apply_penalties(&mut logits, &recent, &cfg);
        // 0 seen three times: 5 - 3×1 - 0.5; 1 seen once: 5 - 1 - 0.5; 2 unseen.
        assert_eq!(logits, vec![1.5, 3.5, 5.0]);
        let mut s = window(cfg, &[0, 0, 0, 1]);
        assert_eq!(s.sample(&[5.0, 5.0, 4.0]), 2);
    }

    #[test]
    fn penalty_window_forgets_old_tokens() {
        let cfg = SamplerConfig {
            repeat_penalty: 10.0,
            repeat_last_n: 2,
            ..SamplerConfig::default()
        };
        // 0 fell out of the two-token window, so it wins again.
        let mut s = window(cfg.clone(), &[0, 2, 3]);
        assert_eq!(s.sample(&[2.0, 1.0, 0.0, 0.0]), 0);
        s.accept(0);
        assert_eq!(s.sample(&[2.0, 1.0, 0.0, 0.0]), 1);
        // repeat_last_n 0 turns the penalties off.
        let mut off = window(
            SamplerConfig {
                repeat_last_n: 0,
                ..cfg
            },
            &[0],
        );
        assert_eq!(off.sample(&[2.0, 1.0]), 0);
    }

    #[test]
    fn penalties_break_a_greedy_loop() {
        // A toy model that always prefers to repeat its last token: greedy decoding loops on
        // one token; with a repeat penalty it moves on, so fewer repeats is the expected
        // direction.
        let next_logits = |last: u32| -> Vec<f32> {
            (0..8u32)
                .map(|t| if t == last { 3.0 } else { 2.0 - t as f32 * 0.1 })
                .collect()
        };
        let run = |cfg: SamplerConfig| {
            let mut s = Sampler::new(cfg);
            let mut out = vec![0u32];
            s.accept(0);
            for _ in 0..12 {
                let id = s.sample(&next_logits(*out.last().unwrap()));
                s.accept(id);
                out.push(id);
            }
            out
        };
        let distinct = |v: &[u32]| {
            let mut v = v.to_vec();
            v.sort();
            v.dedup();
            v.len()
        };
        let plain = run(SamplerConfig::default());
        assert_eq!(distinct(&plain), 1, "{plain:?}");
        let penalized = run(SamplerConfig {
            repeat_penalty: 1.8,
            ..SamplerConfig::default()
        });
        assert!(distinct(&penalized) > 2, "{penalized:?}");
        let freq = run(SamplerConfig {
            frequency_penalty: 0.6,
            ..SamplerConfig::default()
        });
        assert!(distinct(&freq) > 1, "{freq:?}");
    }

    #[test]
    fn validate_names_the_bad_setting() {
        assert!(SamplerConfig::default().validate().is_ok());
        let bad = |c: SamplerConfig| c.validate().unwrap_err();
        assert!(bad(SamplerConfig {
            temperature: -1.0,
            ..SamplerConfig::default()
        })
        .contains("temp"));
        assert!(bad(SamplerConfig {
            repeat_penalty: 0.0,
            ..SamplerConfig::default()
        })
        .contains("repeat-penalty"));
        assert!(bad(SamplerConfig {
            top_p: 0.0,
            ..SamplerConfig::default()
        })
        .contains("top-p"));
    }

    /// Pseudo-random logits with ties, odd length (not a multiple of the 32-id mask words).
    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n)
            .map(|_| ((r.next_f64() * 40.0) as i32) as f32 * 0.25 - 5.0)
            .collect()
    }

    fn configs() -> Vec<SamplerConfig> {
        let base = SamplerConfig::default();
        vec![
            base.clone(),
            SamplerConfig {
                temperature: 0.8,
                seed: 3,
                ..base.clone()
            },
            SamplerConfig {
                temperature: 1.2,
                top_k: 7,
                top_p: 0.9,
                min_p: 0.05,
                seed: 9,
                ..base.clone()
            },
            SamplerConfig {
                repeat_penalty: 1.3,
                presence_penalty: 0.4,
                frequency_penalty: 0.2,
                ..base.clone()
            },
            SamplerConfig {
                temperature: 0.7,
                repeat_penalty: 1.1,
                frequency_penalty: 0.5,
                seed: 5,
                ..base
            },
        ]
    }

    #[test]
    fn sampling_under_a_full_mask_is_plain_sampling() {
        let n: usize = 1001;
        let all = vec![u32::MAX; n.div_ceil(32)];
        for (k, cfg) in configs().into_iter().enumerate() {
            let (mut a, mut b) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
            for step in 0..50 {
                let l = logits(n, (k * 100 + step) as u64);
                let (x, y) = (a.sample(&l), b.sample_allowed(&l, &all).unwrap());
                assert_eq!(x, y, "config {k} step {step}");
                a.accept(x);
                b.accept(y);
            }
        }
    }

    #[test]
    fn sampling_under_a_mask_draws_only_allowed_ids_and_matches_masked_logits() {
        let n: usize = 777;
        for (k, cfg) in configs().into_iter().enumerate() {
            let mut r = Rng::new(k as u64);
            for step in 0..40 {
                let l = logits(n, step);
                let mut bits = vec![0u32; n.div_ceil(32)];
                for id in 0..n {
                    if r.next_u64() % 5 == 0 {
                        bits[id / 32] |= 1 << (id % 32);
                    }
                }
                // The same draw as plain sampling over logits with the others at -inf.
                let masked: Vec<f32> = (0..n)
                    .map(|i| {
                        if bits[i / 32] >> (i % 32) & 1 == 1 {
                            l[i]
                        } else {
                            f32::NEG_INFINITY
                        }
                    })
                    .collect();
                let mut a = Sampler::new(cfg.clone());
                let mut b = Sampler::new(cfg.clone());
                for id in [3u32, 3, 10, 500] {
                    a.accept(id);
                    b.accept(id);
                }
                let got = b.sample_allowed(&l, &bits).unwrap();
                assert!(
                    bits[got as usize / 32] >> (got % 32) & 1 == 1,
                    "config {k}: {got} not allowed"
                );
                if cfg.temperature == 0.0 {
                    assert_eq!(got, a.sample(&masked), "config {k} step {step}");
                }
            }
            // Nothing allowed: no token, not a panic. Bits past the vocabulary are ignored.
            let mut s = Sampler::new(cfg.clone());
            assert_eq!(
                s.sample_allowed(&logits(n, 1), &vec![0; n.div_ceil(32)]),
                None
            );
            let mut past = vec![0u32; n.div_ceil(32)];
            past[n / 32] = u32::MAX << (n % 32);
            assert_eq!(s.sample_allowed(&logits(n, 1), &past), None);
        }
    }
}
