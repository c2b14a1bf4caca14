//! Text ↔ token ids through Hugging Face's `tokenizers` crate (pure-Rust regex backend), plus
//! streaming detokenization that never prints half a UTF-8 character.

use crate::Error;
use std::path::{Path, PathBuf};

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    pub path: PathBuf,
}

impl TextTokenizer {
    pub fn from_file(path: &Path) -> Result<TextTokenizer, Error> {
        let bytes = std::fs::read(path).map_err(|e| Error::Tokenizer {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        TextTokenizer::from_bytes(&bytes, path)
    }

    /// A tokenizer from `tokenizer.json` bytes (e.g. a blob inside a `.pocket`); `origin` names
    /// it in errors.
    pub fn from_bytes(bytes: &[u8], origin: &Path) -> Result<TextTokenizer, Error> {
        let inner = match crate::tokenizer_fast::bpe_tokenizer(bytes) {
            Some(t) => t,
            None => tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| Error::Tokenizer {
                path: origin.to_path_buf(),
                reason: e.to_string(),
            })?,
        };
        Ok(TextTokenizer {
            inner,
            path: origin.to_path_buf(),
        })
    }

    /// Token ids of `text`. `add_special` applies the tokenizer's post-processor (e.g. a BOS),
    /// as `tokenizer(text)` does in transformers; chat templates already contain their special
    /// tokens and are encoded without it, as `apply_chat_template` does.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, Error> {
        let enc = self
            .inner
            .encode(text, add_special)
            .map_err(|e| Error::Tokenizer {
                path: self.path.clone(),
                reason: format!("encoding failed: {e}"),
            })?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        // Decoding valid ids cannot fail for the BPE tokenizers we load; an id outside the
        // vocabulary is dropped rather than aborting a chat.
        self.inner.decode(ids, skip_special).unwrap_or_default()
    }

    /// The `tokenizers` object itself, for code that needs its vocabulary and decoder
    /// (the grammar engine's byte-level view of every token).
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Names of the model type and pre-tokenizer, for `inspect`.
    pub fn summary(&self) -> String {
        let model = match self.inner.get_model() {
            tokenizers::ModelWrapper::BPE(_) => "BPE",
            tokenizers::ModelWrapper::WordPiece(_) => "WordPiece",
            tokenizers::ModelWrapper::WordLevel(_) => "WordLevel",
            tokenizers::ModelWrapper::Unigram(_) => "Unigram",
        };
        let added = self.inner.get_added_tokens_decoder().len();
        format!("{model}, {} tokens ({added} added)", self.vocab_size())
    }

    /// Every added token's text (special or not): the tokenizer matches these in raw text
    /// before anything else, so user text that spells one would become that token.
    pub fn added_token_texts(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .get_added_tokens_decoder()
            .into_values()
            .map(|t| t.content)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Special (added, `special: true`) tokens and their ids.
    pub fn special_tokens(&self) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = self
            .inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, t)| (id, t.content))
            .collect();
        v.sort();
        v
    }
}

/// `text` without the U+FFFD that decoding puts where the last character's bytes are
/// incomplete. Only trailing ones go: a replacement character inside the text was a whole token
/// of its own, and is kept.
pub fn trim_incomplete_char(text: &str) -> &str {
    text.trim_end_matches('\u{FFFD}')
}

/// Turns a growing list of token ids into text pieces as soon as they are complete characters.
///
/// Byte-level BPE splits a character such as an emoji across several tokens; decoding each
/// token alone would print U+FFFD. We decode a short window of recent tokens and only emit text
/// once the window no longer ends in an incomplete character (the approach of HF's
/// `TextStreamer` and text-generation-inference).
pub struct TextStream<'t> {
    tok: &'t TextTokenizer,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl<'t> TextStream<'t> {
    pub fn new(tok: &'t TextTokenizer) -> TextStream<'t> {
        TextStream {
            tok,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// Adds a token; returns the new text it completes, if any.
    pub fn push(&mut self, id: u32) -> Option<String> {
        self.ids.push(id);
        let before = self.tok.decode(&self.ids[self.prefix..self.read], true);
        let now = self.tok.decode(&self.ids[self.prefix..], true);
        if now.len() > before.len()
            && !now.ends_with('\u{FFFD}')
            && now.is_char_boundary(before.len())
        {
            let piece = now[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            Some(piece)
        } else {
            None
        }
    }

    /// Whatever is still held back, less an incomplete character at the very end: an answer
    /// cut at its token limit may stop inside a character, and its first bytes alone would
    /// print as U+FFFD.
    pub fn finish(&mut self) -> Option<String> {
        let before = self.tok.decode(&self.ids[self.prefix..self.read], true);
        let decoded = self.tok.decode(&self.ids[self.prefix..], true);
        let now = trim_incomplete_char(&decoded);
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        (now.len() > before.len() && now.is_char_boundary(before.len()))
            .then(|| now[before.len()..].to_string())
    }
}
