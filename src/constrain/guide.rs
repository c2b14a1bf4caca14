//! A compiled constraint following one answer: which tokens may come next, which are forced.

use super::spec::{with_options, Constraint, ConstraintError};
use super::vocab::Vocabulary;
use crate::tokenizer::TextTokenizer;
use crate::Error;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::SimpleVob;

/// The grammar engine set up for one model's vocabulary. Building it walks the whole
/// vocabulary (a few ms to tens of ms), so a session builds it once and compiles every
/// constraint against it.
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    pub fn new(
        tokenizer: &TextTokenizer,
        model_vocab: usize,
        stop_ids: &[u32],
    ) -> Result<Grammars, ConstraintError> {
        let vocab = Vocabulary::new(tokenizer.hf(), model_vocab, stop_ids)
            .map_err(|e| ConstraintError(e.0))?;
        let env = vocab.into_env();
        let mut factory = ParserFactory::new(&env, Default::default(), &[])
            .map_err(|e| ConstraintError(format!("grammar engine: {e}")))?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// Token `id` as the bytes it writes (a byte-level BPE token may be part of a character):
    /// the `bytes` of a server's logprobs. Empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let trie = self.factory.tok_env().tok_trie();
        if (id as usize) < trie.vocab_size() {
            trie.token(id).to_vec()
        } else {
            Vec::new()
        }
    }

    /// Compiles `c`; what the engine does not implement (a schema keyword, a grammar
    /// construct) is refused here, before generation.
    pub fn compile(&self, c: &Constraint) -> Result<Guide, ConstraintError> {
        let grammar = match c {
            Constraint::JsonSchema(s) => TopLevelGrammar::from_json_schema(with_options(s)),
            _ => TopLevelGrammar::from_lark(c.lark()),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| ConstraintError(clean(&e.to_string())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError(clean(&e)));
        }
        Ok(Guide {
            matcher,
            forced: 0,
            force: true,
            mask_time: Default::default(),
            mask_wait: Default::default(),
            description: c.describe(),
            trigger: None,
            seen: Vec::new(),
        })
    }

    /// A guide that starts only once the answer's text reaches `trigger` (say `<tool_call>`):
    /// before that the model writes freely; after it, `c` constrains what follows.
    pub fn compile_lazy(&self, c: &Constraint, trigger: &str) -> Result<Guide, ConstraintError> {
        let mut g = self.compile(c)?;
        g.trigger = Some(trigger.as_bytes().to_vec());
        Ok(g)
    }
}

/// llguidance's message on one line: without the echo of the grammar source (`  1 | …` and
/// the `^` under it) and the prefix that names its own internals.
fn clean(msg: &str) -> String {
    let parts: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !l.chars().all(|c| c == '^' || c == ' '))
        .filter(|l| {
            let (n, rest) = l.split_at(l.find(|c: char| !c.is_ascii_digit()).unwrap_or(l.len()));
            !(!n.is_empty() && rest.trim_start().starts_with('|'))
        })
        .collect();
    parts
        .join(": ")
        .replace("failed to compile JSON schema: ", "")
        .trim_start_matches("Error: ")
        .to_string()
}

/// One answer's constraint in progress.
pub struct Guide {
    matcher: Matcher,
    /// Tokens appended without sampling so far.
    pub forced: usize,
    /// Append forced tokens without sampling (on by default). Off, every token is sampled
    /// from its mask one step at a time: for measuring what forcing saves.
    pub force: bool,
    /// Time spent computing masks, and the part of it the forward pass did not hide (the
    /// decode loop waited for the mask after its logits were ready).
    pub mask_time: std::time::Duration,
    pub mask_wait: std::time::Duration,
    description: String,
    /// Lazy guides: the text that switches the constraint on (`None` once it is on, and for
    /// guides that constrain the whole answer).
    trigger: Option<Vec<u8>>,
    /// The last bytes of the answer while waiting for the trigger.
    seen: Vec<u8>,
}

impl Guide {
    fn fail(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Invalid(format!("{} constraint: {what}: {e}", self.description))
    }

    /// The constraint is on (always, unless it waits for its trigger).
    pub fn active(&self) -> bool {
        self.trigger.is_none()
    }

    /// Before the trigger: notes a token the model wrote freely, and switches the constraint
    /// on when the text now ends with the trigger.
    pub fn watch(&mut self, token: u32) {
        let Some(trigger) = &self.trigger else {
            return;
        };
        let bytes = match self.matcher.tok_env() {
            Ok(env) => env.tok_trie().token(token).to_vec(),
            Err(_) => return,
        };
        self.seen.extend_from_slice(&bytes);
        if self.seen.ends_with(trigger) {
            self.trigger = None;
            self.seen.clear();
        } else {
            let keep = self.seen.len().saturating_sub(trigger.len());
            self.seen.drain(..keep);
        }
    }

    /// The tokens allowed next, as a bit set over the vocabulary (the end-of-sequence ids are
    /// set when the text so far is complete).
    pub fn mask(&mut self) -> Result<SimpleVob, Error> {
        let t = std::time::Instant::now();
        let m = self.matcher.compute_mask();
        self.mask_time += t.elapsed();
        m.map_err(|e| self.fail("mask", e))
    }

    pub fn consume(&mut self, tokens: &[u32]) -> Result<(), Error> {
        self.matcher
            .consume_tokens(tokens)
            .map_err(|e| self.fail("token", e))
    }

    /// Tokens the constraint forces next (a schema's fixed keys and punctuation), as the
    /// model's tokenizer writes them; empty when the model has a choice.
    pub fn forced(&mut self) -> Vec<u32> {
        if !self.force || self.matcher.is_stopped() {
            return Vec::new();
        }
        self.matcher.compute_ff_tokens()
    }

    /// The text so far is a complete answer (it may still go on).
    pub fn accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// Nothing more can follow: the answer is complete and ends here.
    pub fn stopped(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// The engine's error, if it hit one (then it allows nothing more).
    pub fn error(&self) -> Option<String> {
        self.matcher.get_error()
    }
}
