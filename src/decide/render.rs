//! Decision prompts: each question (and each option order it is asked in) rendered to token
//! ids, with what the readout reads from them.
//!
//! pocket's built-in prompt is one user turn through the model's own chat template (ChatML,
//! Llama, Gemma … whatever the file carries), or plain text with `Answer:` for a model without
//! one. Its text is written here rather than in a Jinja file so that it reads top to bottom;
//! `fixtures/make_decision_fixtures.py` writes it again in Python, independently, for the
//! exactness tests:
//!
//! ```text
//! Text:                         ← state first (the default); --order question-first puts the
//! {state}                          question block first and the text after it, so a repeated
//!                                  question is a cached prefix
//! {instructions}
//! Options:                      ← choice; noul: "Yes" / "No" lines; score: "Levels:" 0, 1, …
//! - A. refund: wants money back ← letters; keys and pointer: "- refund: wants money back"
//! Answer with the letter of the best option only.
//! ```
//!
//! User text (state, instructions, keys, descriptions) is escaped first: a special token's
//! spelling in it (`<|im_end|>`) must not become that token. llama.cpp's rule turns
//! `<|name|>` into `<¦name¦>`; any other added token's spelling gets a `¦` after its first
//! character.

use super::request::{Kind, Opt, Question, Request};
use crate::chat_template::{python_json_string, Message};
use crate::loader::LoadedModel;
use crate::Error;
use serde_json::{Map, Value};

/// Where the question goes relative to the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The state, then the question: several questions about one state share its tokens.
    StateFirst,
    /// The question, then the state: one question asked of many states shares its tokens
    /// (an intent router), and a prompt cache turns it into a prefill of the state alone.
    QuestionFirst,
}

impl Order {
    pub fn parse(s: &str) -> Option<Order> {
        match s {
            "state-first" => Some(Order::StateFirst),
            "question-first" => Some(Order::QuestionFirst),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Order::StateFirst => "state-first",
            Order::QuestionFirst => "question-first",
        }
    }
}

/// How a question's options are shown and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// One single-token label per option (A, B, …), read from the next-token logits at the
    /// prompt's end.
    Letters,
    /// Each option's key as the answer's text, scored by its log-likelihood up to the end of
    /// the turn; all options in one multi-row pass.
    Keys,
    /// Each option's answer tokens (as in `Keys`) as a path in a prefix tree: its probability
    /// is the one constrained decoding (`pocket run --choices`) gives it, a softmax over the
    /// options' next tokens wherever their paths part. One pass when the options' first
    /// tokens all differ; else one more pass for the places they part.
    Constrained,
    /// Each option line ends at a marker; a pointer head scores the marker's hidden state
    /// against the prompt's last one.
    Pointer,
    /// The prompt's last hidden state, for a probe head trained on one question.
    Probe,
}

impl Style {
    pub fn name(self) -> &'static str {
        match self {
            Style::Letters => "letters",
            Style::Keys => "keys",
            Style::Constrained => "constrained",
            Style::Pointer => "pointer",
            Style::Probe => "probe",
        }
    }

    pub fn parse(s: &str) -> Option<Style> {
        match s {
            "letters" => Some(Style::Letters),
            "keys" => Some(Style::Keys),
            "constrained" => Some(Style::Constrained),
            "pointer" => Some(Style::Pointer),
            "probe" => Some(Style::Probe),
            _ => None,
        }
    }
}

/// What a readout takes from one prompt's pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// Per option (in shown order), the token ids whose logits at the last position are its
    /// score (their log-sum-exp: `A` and ` A`, `yes` and `Yes`).
    Labels(Vec<Vec<u32>>),
    /// Per option, the tokens of its answer text (the end of turn included): its score is their
    /// log-likelihood after the prompt.
    Keys(Vec<Vec<u32>>),
    /// Per option, the tokens of its answer text (the end of turn included), read as a path in
    /// the options' prefix tree: a softmax over the options' tokens where the paths part.
    Tree(Vec<Vec<u32>>),
    /// Per option, the position of its marker in the prompt; the decision is read at the last
    /// position.
    Markers(Vec<usize>),
    /// The last position's hidden state, for a probe over these option keys.
    Last(Vec<String>),
}

/// One question asked once: its prompt and what is read from it.
#[derive(Clone, Debug)]
pub struct Variant {
    /// Index into the request's questions.
    pub question: usize,
    /// The options were shown (and are scored) in reverse order.
    pub reversed: bool,
    pub tokens: Vec<u32>,
    pub read: Read,
    /// A noul question read as a rating (lev: its labels are the ratings 0–8, the answer the
    /// expected rating / 8).
    pub ratings: bool,
}

/// A request's prompts, and how many leading tokens they all share (run once, before the
/// variants' own tokens).
#[derive(Clone, Debug)]
pub struct Plan {
    pub variants: Vec<Variant>,
    pub shared: usize,
}

impl Plan {
    /// A plan of `variants`, its shared beginning settled.
    pub fn settled(variants: Vec<Variant>) -> Plan {
        let mut plan = Plan {
            variants,
            shared: 0,
        };
        plan.settle_shared();
        plan
    }

    /// The shared tokens.
    pub fn prefix(&self) -> &[u32] {
        &self.variants[0].tokens[..self.shared]
    }

    /// Prompt tokens the request reads (shared ones once).
    pub fn input_tokens(&self) -> usize {
        self.shared
            + self
                .variants
                .iter()
                .map(|v| v.tokens.len() - self.shared)
                .sum::<usize>()
    }

    fn settle_shared(&mut self) {
        let first = &self.variants[0].tokens;
        let mut shared = first.len();
        for v in &self.variants {
            let common = first
                .iter()
                .zip(&v.tokens)
                .take_while(|(a, b)| a == b)
                .count();
            // Every variant runs at least its last token, and its markers, itself.
            let own = match &v.read {
                Read::Markers(m) => m.iter().copied().min().unwrap_or(v.tokens.len() - 1),
                _ => v.tokens.len() - 1,
            };
            shared = shared.min(common).min(own);
        }
        self.shared = shared;
    }
}

/// Escapes special-token spellings in user text (see the module's docs).
pub struct Escaper {
    added: Vec<String>,
}

impl Escaper {
    pub fn new(model: &LoadedModel) -> Escaper {
        let mut added: Vec<String> = model
            .tokenizer
            .added_token_texts()
            .into_iter()
            .filter(|t| t.chars().count() >= 2 && t.contains(['<', '>', '[', ']', '|']))
            .collect();
        // Longest first: `<|im_start|>` before a shorter token inside it.
        added.sort_by_key(|t| std::cmp::Reverse(t.len()));
        Escaper { added }
    }

    pub fn text(&self, s: &str) -> String {
        let mut out = pipes(s);
        for t in &self.added {
            if out.contains(t.as_str()) {
                let first = t.chars().next().expect("two chars");
                let broken = format!("{first}\u{a6}{}", &t[first.len_utf8()..]);
                out = out.replace(t.as_str(), &broken);
            }
        }
        out
    }

    /// Every string in `v`, object keys included.
    pub fn value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.value(x)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (self.text(k), self.value(x)))
                    .collect::<Map<String, Value>>(),
            ),
            other => other.clone(),
        }
    }
}

/// llama.cpp's escape: `<|name|>` (name of letters, digits and `_`) → `<¦name¦>`.
fn pipes(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut done) = (0, 0);
    while let Some(at) = text[i..].find("<|").map(|p| p + i) {
        let mut j = at + 2;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
            j += 1;
        }
        if j > at + 2 && text[j..].starts_with("|>") {
            out.push_str(&text[done..at]);
            out.push_str("<\u{a6}");
            out.push_str(&text[at + 2..j]);
            out.push_str("\u{a6}>");
            done = j + 2;
            i = j + 2;
        } else {
            i = at + 1;
        }
    }
    out.push_str(&text[done..]);
    out
}

/// The answer text a noul or score option is read as when its labels are not single tokens.
fn answer_word(kind: Kind, key: &str) -> String {
    match (kind, key) {
        (Kind::Noul, "true") => "Yes".into(),
        (Kind::Noul, _) => "No".into(),
        _ => key.into(),
    }
}

/// Text as the prompt shows it: a string itself, anything else as indented JSON.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => python_json_string(other, Some(2)),
    }
}

/// The labels a letters readout can use: A–Z, then AA, AB, … (those that are one token).
pub const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// Marks where an option line ends in the built-in pointer prompt: removed from the text,
/// which is tokenized piece by piece around it.
const MARK: char = '\u{1}';

/// What the built-in prompt needs besides the question: how to show and read it.
pub struct Builtin<'m> {
    pub model: &'m LoadedModel,
    pub order: Order,
    pub style: Style,
    pub escaper: Escaper,
    /// The token that ends an answer (`<|im_end|>`, `<end_of_turn>` …), scored after a key.
    pub end: Option<u32>,
}

impl<'m> Builtin<'m> {
    pub fn new(model: &'m LoadedModel, order: Order, style: Style) -> Builtin<'m> {
        let eos = model
            .tokenizer_meta
            .eos_token
            .as_deref()
            .and_then(|t| model.tokenizer.token_to_id(t))
            .filter(|id| model.stop_ids.contains(id));
        Builtin {
            model,
            order,
            style,
            escaper: Escaper::new(model),
            end: eos.or_else(|| model.stop_ids.first().copied()),
        }
    }

    fn chat(&self) -> bool {
        self.model.template.is_some()
    }

    /// Every question of `req` as prompts (two option orders for a choice when `reverse`).
    pub fn plan(&self, req: &Request, reverse: bool) -> Result<Plan, Error> {
        let state = self.escaper.value(&req.state);
        let mut variants = Vec::new();
        for (qi, q) in req.questions.iter().enumerate() {
            let orders: &[bool] = if reverse && q.kind == Kind::Choice && q.options.len() > 1 {
                &[false, true]
            } else {
                &[false]
            };
            for &reversed in orders {
                variants.push(self.variant(qi, q, &state, reversed)?);
            }
        }
        Ok(Plan::settled(variants))
    }

    fn variant(
        &self,
        qi: usize,
        q: &Question,
        state: &Value,
        reversed: bool,
    ) -> Result<Variant, Error> {
        let mut shown: Vec<Opt> = q.options.clone();
        if reversed {
            shown.reverse();
        }
        let labels = match (self.style, q.kind) {
            (Style::Letters, Kind::Choice) => Some(self.letter_labels(shown.len())?),
            _ => None,
        };
        let text = self.user_text(q, &shown, labels.as_deref(), state);
        let (tokens, marks) = self.tokenize(&text)?;
        let read = match (self.style, q.kind) {
            (Style::Pointer, _) => {
                if marks.len() != shown.len() {
                    return Err(Error::Invalid(format!(
                        "question {:?}: the prompt has {} option markers for {} options",
                        q.name,
                        marks.len(),
                        shown.len()
                    )));
                }
                Read::Markers(marks)
            }
            (Style::Probe, _) => Read::Last(shown.iter().map(|o| o.key.clone()).collect()),
            (Style::Letters, Kind::Choice) => {
                let labels = labels.expect("letters");
                Read::Labels(labels.iter().map(|l| self.label_group(&[l])).collect())
            }
            (Style::Keys, Kind::Choice) => Read::Keys(
                shown
                    .iter()
                    .map(|o| self.key_tokens(&self.escaper.text(&o.key)))
                    .collect::<Result<_, _>>()?,
            ),
            (Style::Constrained, Kind::Choice) => Read::Tree(
                shown
                    .iter()
                    .map(|o| self.key_tokens(&self.escaper.text(&o.key)))
                    .collect::<Result<_, _>>()?,
            ),
            (_, Kind::Noul) => Read::Labels(
                shown
                    .iter()
                    .map(|o| match o.key.as_str() {
                        "true" => self.label_group(&["yes", "Yes", "YES"]),
                        _ => self.label_group(&["no", "No", "NO"]),
                    })
                    .collect(),
            ),
            (_, Kind::Score) => Read::Labels(
                shown
                    .iter()
                    .map(|o| self.label_group(&[o.key.as_str()]))
                    .collect(),
            ),
        };
        // A vocabulary without single-token yes/no (or digit) labels reads them as answer
        // texts instead, as the keys readout reads a choice's names.
        let read = match read {
            Read::Labels(groups) if groups.iter().any(Vec::is_empty) => {
                let words = shown
                    .iter()
                    .map(|o| self.key_tokens(&answer_word(q.kind, &o.key)))
                    .collect::<Result<_, _>>()?;
                match self.style {
                    Style::Constrained => Read::Tree(words),
                    _ => Read::Keys(words),
                }
            }
            other => other,
        };
        Ok(Variant {
            question: qi,
            reversed,
            tokens,
            read,
            ratings: false,
        })
    }

    /// The first `n` labels of A, B, …, Z, AA, AB, … that are one token each.
    fn letter_labels(&self, n: usize) -> Result<Vec<String>, Error> {
        let mut codes: Vec<String> = LETTERS.chars().map(String::from).collect();
        for a in LETTERS.chars() {
            codes.extend(LETTERS.chars().map(|b| format!("{a}{b}")));
        }
        let single: Vec<String> = codes
            .into_iter()
            .filter(|c| self.single(c).is_some())
            .take(n)
            .collect();
        if single.len() < n {
            return Err(Error::Invalid(format!(
                "{n} options need {n} single-token labels; this vocabulary has {} (use --readout keys)",
                single.len()
            )));
        }
        Ok(single)
    }

    fn single(&self, text: &str) -> Option<u32> {
        match self.model.tokenizer.encode(text, false).ok()?.as_slice() {
            [id] => Some(*id),
            _ => None,
        }
    }

    /// The single-token spellings of `forms`, each also after a space.
    fn label_group(&self, forms: &[&str]) -> Vec<u32> {
        let mut g: Vec<u32> = Vec::new();
        for f in forms {
            for text in [f.to_string(), format!(" {f}")] {
                if let Some(id) = self.single(&text) {
                    if !g.contains(&id) {
                        g.push(id);
                    }
                }
            }
        }
        g
    }

    /// An option key as the model would write it as its whole answer, then the end of turn.
    fn key_tokens(&self, key: &str) -> Result<Vec<u32>, Error> {
        let text = if self.chat() {
            key.to_string()
        } else {
            format!(" {key}")
        };
        let mut t = self.model.tokenizer.encode(&text, false)?;
        if t.is_empty() {
            return Err(Error::Invalid(format!("option {key:?} has no tokens")));
        }
        // The end of the answer: in a chat, the end of the turn; constrained decoding of plain
        // text also ends an option that another one continues with the end of sequence.
        if self.chat() || self.style == Style::Constrained {
            t.extend(self.end);
        }
        Ok(t)
    }

    /// The user turn's text (module docs); option lines end with [`MARK`] in the pointer style.
    pub fn user_text(
        &self,
        q: &Question,
        shown: &[Opt],
        labels: Option<&[String]>,
        state: &Value,
    ) -> String {
        let e = &self.escaper;
        let mark = if self.style == Style::Pointer {
            MARK.to_string()
        } else {
            String::new()
        };
        let mut block = String::new();
        if !q.instructions.is_null() {
            block.push_str(&show(&e.value(&q.instructions)));
            block.push('\n');
        }
        let desc = |o: &Opt| match &o.description {
            Value::Null => String::new(),
            d => format!(": {}", show(&e.value(d))),
        };
        let answer = match q.kind {
            Kind::Choice => {
                block.push_str("Options:\n");
                for (i, o) in shown.iter().enumerate() {
                    let label = labels.map_or(String::new(), |l| format!("{}. ", l[i]));
                    block.push_str(&format!("- {label}{}{}{mark}\n", e.text(&o.key), desc(o)));
                }
                match labels {
                    Some(_) => "Answer with the letter of the best option only.",
                    None => "Answer with the name of the best option only.",
                }
            }
            Kind::Noul => {
                for o in shown {
                    let word = if o.key == "true" { "Yes" } else { "No" };
                    if !o.description.is_null() || self.style == Style::Pointer {
                        block.push_str(&format!("- {word}{}{mark}\n", desc(o)));
                    }
                }
                "Answer yes or no only."
            }
            Kind::Score => {
                block.push_str("Levels:\n");
                for o in shown {
                    block.push_str(&format!("{}{}{mark}\n", o.key, desc(o)));
                }
                "Answer with the number of the level only."
            }
        };
        block.push_str(answer);
        let text = show(state);
        match self.order {
            Order::StateFirst => format!("Text:\n{text}\n\n{block}"),
            Order::QuestionFirst => format!("{block}\n\nText:\n{text}"),
        }
    }

    /// The whole prompt's ids, and where each [`MARK`] was: the position of the last token
    /// before it (the text is tokenized piece by piece between marks).
    fn tokenize(&self, user: &str) -> Result<(Vec<u32>, Vec<usize>), Error> {
        let full = if self.chat() {
            self.model
                .render_chat(&[Message::new("user", user)], true)?
        } else {
            format!("{user}\nAnswer:")
        };
        let tok = &self.model.tokenizer;
        let mut ids = Vec::new();
        let mut marks = Vec::new();
        let pieces: Vec<&str> = full.split(MARK).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let add_bos = i == 0 && !self.chat();
            ids.extend(tok.encode(piece, add_bos)?);
            if i + 1 < pieces.len() {
                if ids.is_empty() {
                    return Err(Error::Invalid("an option marker before any text".into()));
                }
                marks.push(ids.len() - 1);
            }
        }
        if ids.is_empty() {
            return Err(Error::Invalid("the decision prompt has no tokens".into()));
        }
        Ok((ids, marks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_token_spellings_are_broken_as_llama_cpp_breaks_them() {
        assert_eq!(pipes("a<|im_end|>b<|x"), "a<\u{a6}im_end\u{a6}>b<|x");
        assert_eq!(pipes("<||> <|a b|>"), "<||> <|a b|>");
        assert_eq!(pipes("<|<|tok|>"), "<|<\u{a6}tok\u{a6}>");
        let e = Escaper {
            added: vec!["<start_of_turn>".into(), "</s>".into()],
        };
        assert_eq!(
            e.text("x<start_of_turn>user</s><|eot_id|>"),
            "x<\u{a6}start_of_turn>user<\u{a6}/s><\u{a6}eot_id\u{a6}>"
        );
    }
}
