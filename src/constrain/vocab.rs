//! The grammar engine's view of a vocabulary: the exact bytes each token id stands for, and a
//! tokenizer for forced text.
//!
//! llguidance works on bytes, so every id needs the bytes it adds to the text. The token
//! strings in `tokenizer.json` are not those bytes: byte-level BPE (GPT-2, SmolLM2, Qwen)
//! spells each byte as one printable character, and SentencePiece-style vocabularies (Gemma,
//! Llama 2) write a space as `▁` and raw bytes as `<0xAB>`. The decoder named in the file says
//! which, and this module undoes it. Special tokens (`<|im_end|>`) get llguidance's marker
//! byte so no grammar text can ever match them; ids past the tokenizer (a model's padded vocabulary) become
//! unmatchable specials too.

use std::collections::HashMap;
use std::sync::Arc;
use tokenizers::{DecoderWrapper, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// How a vocabulary writes bytes in its token strings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spelling {
    /// GPT-2's byte-to-unicode table: every byte one character.
    ByteLevel,
    /// Text as is, with `space` for a space and `<0xAB>` tokens for raw bytes.
    ByteFallback { space: char },
}

/// What the decoder of `tok` says about its token strings, if it is a kind we can read.
pub fn spelling(tok: &Tokenizer) -> Option<Spelling> {
    fn walk(d: &DecoderWrapper, level: &mut bool, fallback: &mut bool, space: &mut char) {
        match d {
            DecoderWrapper::ByteLevel(_) => *level = true,
            DecoderWrapper::ByteFallback(_) => *fallback = true,
            DecoderWrapper::Metaspace(m) => {
                *fallback = true;
                *space = m.get_replacement();
            }
            DecoderWrapper::Replace(r) => {
                // `Replace` keeps its pattern private; its serialized form names it.
                if let Ok(v) = serde_json::to_value(r) {
                    let from = v["pattern"]["String"].as_str().unwrap_or("");
                    let mut chars = from.chars();
                    if let (Some(c), None, Some(" ")) =
                        (chars.next(), chars.next(), v["content"].as_str())
                    {
                        *space = c;
                    }
                }
            }
            DecoderWrapper::Sequence(seq) => {
                for d in seq.get_decoders() {
                    walk(d, level, fallback, space);
                }
            }
            _ => {}
        }
    }
    let (mut level, mut fallback, mut space) = (false, false, '▁');
    walk(tok.get_decoder()?, &mut level, &mut fallback, &mut space);
    if level {
        Some(Spelling::ByteLevel)
    } else if fallback {
        Some(Spelling::ByteFallback { space })
    } else {
        None
    }
}

/// GPT-2's table from the printable stand-in character back to its byte.
fn byte_level_table() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                (b as char, b)
            } else {
                let c = char::from_u32(next).expect("256..324 are chars");
                next += 1;
                (c, b)
            }
        })
        .collect()
}

/// The bytes of token `text` under `spelling`, or `None` when the string cannot be read that
/// way (the id is then never allowed by a grammar).
fn token_bytes(text: &str, spelling: Spelling, table: &HashMap<char, u8>) -> Option<Vec<u8>> {
    match spelling {
        Spelling::ByteLevel => text.chars().map(|c| table.get(&c).copied()).collect(),
        Spelling::ByteFallback { space } => {
            let hex = text
                .strip_prefix("<0x")
                .and_then(|t| t.strip_suffix('>'))
                .filter(|h| h.len() == 2);
            match hex {
                Some(h) => u8::from_str_radix(h, 16).ok().map(|b| vec![b]),
                None => Some(text.replace(space, " ").into_bytes()),
            }
        }
    }
}

/// A token string llguidance treats as special: its marker byte, then the name.
fn special(name: &str) -> Vec<u8> {
    let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    b.extend_from_slice(name.as_bytes());
    b
}

/// A vocabulary the grammar engine can use: the trie over every id's bytes and the model's
/// own tokenizer for forced text.
pub struct Vocabulary {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

/// Why a vocabulary cannot be used for constrained decoding.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct VocabError(pub String);

impl Vocabulary {
    /// The vocabulary of `tok` padded to `model_vocab` ids (the logits' length); `stop_ids`
    /// are the ids that end an answer, allowed wherever the grammar may end.
    pub fn new(
        tok: &Tokenizer,
        model_vocab: usize,
        stop_ids: &[u32],
    ) -> Result<Vocabulary, VocabError> {
        let spelling = spelling(tok).ok_or_else(|| {
            VocabError(
                "constrained output needs a byte-level BPE or byte-fallback vocabulary; this \
                 tokenizer's decoder is neither"
                    .into(),
            )
        })?;
        let table = byte_level_table();
        let tok_vocab = tok.get_vocab_size(true);
        let n = model_vocab.max(tok_vocab);
        let added = tok.get_added_tokens_decoder();
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let name = tok.id_to_token(id);
            let bytes = match (added.get(&id), name) {
                (Some(a), _) if a.special => special(&a.content),
                // A plain added token (Qwen's `<tool_call>`) is its text, verbatim: a grammar
                // literal then matches the one token the model was trained to write.
                (Some(a), _) => a.content.clone().into_bytes(),
                (None, Some(name)) => token_bytes(&name, spelling, &table)
                    .unwrap_or_else(|| special(&format!("<[unreadable {id}]>"))),
                (None, None) => special(&format!("<[pad {id}]>")),
            };
            words.push(bytes);
        }
        let eos = *stop_ids
            .first()
            .ok_or_else(|| VocabError("the model names no end-of-sequence token".into()))?;
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(stop_ids);
        Ok(Vocabulary {
            trie,
            tokenizer: tok.clone(),
        })
    }

    /// The environment llguidance's parser factory takes.
    pub fn into_env(self) -> TokEnv {
        Arc::new(self)
    }

    /// The bytes token `id` adds (special tokens: the marker byte and their name).
    pub fn bytes(&self, id: u32) -> &[u8] {
        self.trie.token(id)
    }
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Text as the model would see it: the model's tokenizer for UTF-8, the trie's greedy
    /// longest match for anything else (a forced prefix may end inside a character).
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => match self.tokenizer.encode(text, false) {
                Ok(enc) => enc.get_ids().to_vec(),
                Err(_) => self.trie.greedy_tokenize(s),
            },
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_is_a_bijection_and_keeps_printables() {
        let t = byte_level_table();
        assert_eq!(t.len(), 256);
        let mut bytes: Vec<u8> = t.values().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
        assert_eq!(t[&'a'], b'a');
        assert_eq!(t[&'Ġ'], b' ');
        assert_eq!(t[&'Ċ'], b'\n');
    }

    #[test]
    fn byte_fallback_reads_spaces_and_raw_bytes() {
        let t = byte_level_table();
        let sp = Spelling::ByteFallback { space: '▁' };
        assert_eq!(token_bytes("▁hello", sp, &t).unwrap(), b" hello");
        assert_eq!(token_bytes("<0x0A>", sp, &t).unwrap(), b"\n");
        assert_eq!(token_bytes("<0xE4>", sp, &t).unwrap(), [0xE4]);
        assert_eq!(token_bytes("你", sp, &t).unwrap(), "你".as_bytes());
        // A byte-level string with a character outside the table cannot be read.
        assert!(token_bytes("a\u{4e00}", Spelling::ByteLevel, &t).is_none());
    }

    /// A Gemma-style vocabulary: `▁` for spaces, `<0xAB>` byte tokens, byte fallback.
    const SENTENCEPIECE: &str = r#"{"version": "1.0", "truncation": null, "padding": null,
      "added_tokens": [
        {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
        {"id": 1, "content": "<eos>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
      "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
      "pre_tokenizer": null, "post_processor": null,
      "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]},
      "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
        "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
        "vocab": {"<unk>": 0, "<eos>": 1, "<0xE4>": 2, "<0xBD>": 3, "<0xA0>": 4, "▁": 5, "a": 6,
                  "b": 7, "▁a": 8, "{": 9, "}": 10},
        "merges": [["▁", "a"]]}}"#;

    #[test]
    fn a_byte_fallback_vocabulary_reads_back_its_bytes_and_guides() {
        let tok = Tokenizer::from_bytes(SENTENCEPIECE.as_bytes()).unwrap();
        assert_eq!(spelling(&tok), Some(Spelling::ByteFallback { space: '▁' }));
        // Padded to a model vocabulary of 14: ids 11..13 are unmatchable specials.
        let v = Vocabulary::new(&tok, 14, &[1]).unwrap();
        assert_eq!(v.bytes(8), b" a");
        assert_eq!(v.bytes(5), b" ");
        assert_eq!(v.bytes(2), [0xE4]);
        assert_eq!(v.bytes(0)[0], TokTrie::SPECIAL_TOKEN_MARKER);
        assert_eq!(v.bytes(13)[0], TokTrie::SPECIAL_TOKEN_MARKER);
        // "你" is E4 BD A0: written byte token by byte token, each one forced in turn.
        let text = crate::tokenizer::TextTokenizer::from_bytes(
            SENTENCEPIECE.as_bytes(),
            std::path::Path::new("sp"),
        )
        .unwrap();
        let g = crate::constrain::Grammars::new(&text, 14, &[1]).unwrap();
        let c = crate::constrain::Constraint::choices(vec!["你".into(), " a".into()]).unwrap();
        let mut guide = g.compile(&c).unwrap();
        let allowed =
            |m: &toktrie::SimpleVob| (0..14).filter(|&i| m.is_allowed(i)).collect::<Vec<u32>>();
        let first = allowed(&guide.mask().unwrap());
        assert_eq!(first, [2, 5, 8], "the first byte of 你, or a space, or ▁a");
        guide.consume(&[2]).unwrap();
        assert_eq!(allowed(&guide.mask().unwrap()), [3]);
        guide.consume(&[3, 4]).unwrap();
        assert!(guide.accepting());
        assert!(guide.stopped(), "nothing can follow: the answer ends there");
    }
}
