//! Multiple-choice scoring on a fake model whose logits depend on the whole context, so a
//! wrong rewind or an off-by-one row would change the numbers: log-likelihoods equal a direct
//! computation, the shared-prefix path equals running every choice from scratch while running
//! fewer tokens, and acc / acc_norm / acc_bytes pick as lm-eval does.

use pocket_evals::mc::{self, load_items, McItem, Style};
use pocket_evals::{LogitModel, Tokenize};
use serde_json::json;

const VOCAB: usize = 7;

/// Logits for the next token after `context`: a fixed function of the context's length and
/// token sum.
fn next_logits(context: &[u32]) -> Vec<f32> {
    let s: u32 = context.iter().sum();
    let n = context.len() as u32;
    (0..VOCAB as u32)
        .map(|t| ((t * 7 + s * 3 + n) % 11) as f32 * 0.37 - (t % 3) as f32)
        .collect()
}

struct Fake {
    context: Vec<u32>,
    can_rewind: bool,
    fed: usize,
}

impl LogitModel for Fake {
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn reset(&mut self) {
        self.context.clear();
    }
    fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        let mut out = Vec::new();
        for &t in tokens {
            self.context.push(t);
            out.extend(next_logits(&self.context));
        }
        self.fed += tokens.len();
        Ok(out)
    }
    fn rewind(&mut self, len: usize) -> bool {
        if self.can_rewind {
            self.context.truncate(len);
        }
        self.can_rewind
    }
}

/// Characters to tokens: letters a-f are 1-6, everything else 0; "ab" merges into one token
/// (id 6, like "f"), so a context ending in "a" tokenizes differently inside the whole text.
struct Chars;

impl Tokenize for Chars {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let text = text.replace("ab", "f");
        Ok(text
            .chars()
            .map(|c| match c {
                'a'..='f' => c as u32 - 'a' as u32 + 1,
                _ => 0,
            })
            .collect())
    }
}

fn log_softmax(row: &[f32], t: u32) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = row
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    row[t as usize] as f64 - lse
}

/// The reference: lm-eval's input is context tokens + continuation tokens, each continuation
/// token scored by the row of the position before it.
fn direct_ll(ctx: &[u32], cont: &[u32]) -> f64 {
    let mut seq = ctx.to_vec();
    let mut ll = 0.0;
    for &t in cont {
        ll += log_softmax(&next_logits(&seq), t);
        seq.push(t);
    }
    ll
}

fn item(question: &str, choices: &[&str], answer: usize) -> McItem {
    McItem {
        id: json!(0),
        question: question.into(),
        choices: choices.iter().map(|c| c.to_string()).collect(),
        answer,
        line: 1,
    }
}

#[test]
fn shared_prefix_equals_scoring_each_choice_from_scratch() {
    let it = item("cab dab", &["bad", "a", "fee deed", "ab"], 2);
    let req = mc::request(&it, Style::Cloze);
    let mut shared = Fake {
        context: vec![],
        can_rewind: true,
        fed: 0,
    };
    let mut scratch = Fake {
        context: vec![],
        can_rewind: true,
        fed: 0,
    };
    let a = mc::loglikelihoods(&mut shared, &Chars, &req, true).unwrap();
    let b = mc::loglikelihoods(&mut scratch, &Chars, &req, false).unwrap();
    assert_eq!(a.choices, b.choices);
    let mut cont_feed = 0;
    for (c, s) in req.continuations.iter().zip(&a.choices) {
        let (ctx, cont) = mc::encode_pair(&Chars, &req.context, c).unwrap();
        assert!((s.ll - direct_ll(&ctx, &cont)).abs() < 1e-9, "{c}");
        cont_feed += cont.len() - 1;
    }
    let ctx_len = Chars.encode(&req.context).unwrap().len();
    assert_eq!(a.tokens_run, ctx_len + cont_feed);
    assert_eq!(b.tokens_run, 4 * ctx_len + cont_feed);
    assert_eq!(shared.fed, a.tokens_run);
    assert_eq!(scratch.fed, b.tokens_run);

    // A model that cannot rewind silently falls back to running the context per choice.
    let mut stiff = Fake {
        context: vec![],
        can_rewind: false,
        fed: 0,
    };
    let c = mc::loglikelihoods(&mut stiff, &Chars, &req, true).unwrap();
    assert_eq!(c.choices, a.choices);
    assert_eq!(c.tokens_run, b.tokens_run);
}

#[test]
fn trailing_context_space_moves_to_the_continuation() {
    // "…: a" + "b…" would merge "ab" across the boundary; _encode_pair keeps the context's
    // own tokens and takes the rest of the whole text's tokens as the continuation.
    let (ctx, cont) = mc::encode_pair(&Chars, "xa  ", "bc").unwrap();
    assert_eq!(ctx, [0, 1]);
    assert_eq!(cont, [0, 0, 2, 3]); // "xa  bc" → [0, 1, 0, 0, 2, 3], past the context's 2
    let (ctx, cont) = mc::encode_pair(&Chars, "xa", "bc").unwrap();
    assert_eq!(ctx, [0, 1]);
    assert_eq!(cont, [3]); // "xabc" → [0, 6, 3]: the merged token is taken as context
}

#[test]
fn acc_norm_divides_by_characters_and_acc_bytes_by_bytes() {
    let texts: Vec<String> = ["ab", "abcdef", "é"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Raw: choice 0 wins. Per character: -2/2 = -1, -3/6 = -0.5, -1.2/1 → choice 1.
    // Per byte: "é" is 2 bytes: -1.2/2 = -0.6 → still choice 1 (-0.5).
    let v = mc::verdict(&[-2.0, -3.0, -1.2], &texts, 1);
    assert_eq!((v.pred, v.pred_norm, v.pred_bytes), (2, 1, 1));
    assert!(!v.acc && v.acc_norm && v.acc_bytes);
    let v = mc::verdict(&[-2.0, -3.0, -0.9], &texts, 2);
    // Per character -0.5 (choice 1) beats -0.9; per byte "é" has -0.45 and wins.
    assert_eq!((v.pred, v.pred_norm, v.pred_bytes), (2, 1, 2));
    assert!(v.acc && !v.acc_norm && v.acc_bytes);
    // Ties go to the first choice, as np.argmax.
    let v = mc::verdict(&[-1.0, -1.0, -5.0], &texts, 0);
    assert_eq!(v.pred, 0);
}

#[test]
fn letter_style_lists_choices_as_mmlu_does() {
    let it = item("  What is 2+2? ", &["3", "4", "5"], 1);
    let req = mc::request(&it, Style::Letters);
    assert_eq!(req.context, "What is 2+2?\nA. 3\nB. 4\nC. 5\nAnswer:");
    assert_eq!(req.continuations, [" A", " B", " C"]);
    assert_eq!(req.choice_texts, ["A", "B", "C"]);
    let req = mc::request(&it, Style::Cloze);
    assert_eq!(req.context, "Question:   What is 2+2? \nAnswer:");
    assert_eq!(req.continuations, [" 3", " 4", " 5"]);
}

#[test]
fn committed_sample_files_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let j = load_items(dir.join("mc_sample.jsonl")).unwrap();
    let c = load_items(dir.join("mc_sample.csv")).unwrap();
    assert_eq!(j.len(), 3);
    assert_eq!(c.len(), 3);
    for (a, b) in j.iter().zip(&c) {
        assert_eq!(
            (&a.question, &a.choices, a.answer),
            (&b.question, &b.choices, b.answer)
        );
    }
}

/// A [`Fake`] that holds at most `max` tokens, failing beyond them as the engine does.
struct Windowed(Fake, usize);

impl LogitModel for Windowed {
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn reset(&mut self) {
        self.0.reset()
    }
    fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        if self.0.context.len() + tokens.len() > self.1 {
            return Err("context is full".into());
        }
        self.0.logits(tokens)
    }
    fn rewind(&mut self, len: usize) -> bool {
        self.0.rewind(len)
    }
    fn max_len(&self) -> Option<usize> {
        Some(self.1)
    }
}

#[test]
fn a_request_longer_than_the_window_loses_its_oldest_context_as_lm_evals_does() {
    let it = item("abcdef fedcba cab dab bad", &["bad", "a", "fee deed"], 0);
    let req = mc::request(&it, Style::Cloze);
    let max = 12;
    let mut m = Windowed(
        Fake {
            context: vec![],
            can_rewind: true,
            fed: 0,
        },
        max,
    );
    let got = mc::loglikelihoods(&mut m, &Chars, &req, true).unwrap();
    for (c, s) in req.continuations.iter().zip(&got.choices) {
        let (ctx, cont) = mc::encode_pair(&Chars, &req.context, c).unwrap();
        assert!(ctx.len() + cont.len() > max + 1, "the test must overflow");
        // lm-eval: inp = (ctx + cont)[-(max + 1):][:-1], scored on its last len(cont) rows.
        let whole: Vec<u32> = ctx.iter().chain(&cont).copied().collect();
        let kept = &whole[whole.len() - (max + 1)..];
        let kept_ctx = &kept[..kept.len() - cont.len()];
        assert!((s.ll - direct_ll(kept_ctx, &cont)).abs() < 1e-9, "{c}");
    }
    // A continuation longer than the window is refused, not cut.
    let long = item("a", &["abcdefabcdefabcdef"], 0);
    let err = mc::loglikelihoods(&mut m, &Chars, &mc::request(&long, Style::Cloze), true);
    assert!(err.unwrap_err().to_string().contains("does not fit"));
}
