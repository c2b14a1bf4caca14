//! A faster way to the same `tokenizers::Tokenizer` for byte-pair-encoding vocabularies.
//!
//! The crate deserializes a BPE's merges through an untagged enum, which buffers the whole
//! list as generic values first: with Gemma's 514,906 merges that is most of a second and a
//! few hundred MB at peak. Here the vocabulary and merges are read straight into typed maps
//! (one owned string each, as the builder takes them) and handed to the crate's own
//! `BpeBuilder`; every other part (normalizer, pre-tokenizer, post-processor, decoder, added
//! tokens) still goes through the crate's deserializers, in the order its own loader uses.
//! Anything this does not recognise returns `None`, and the caller takes the crate's path.

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use tokenizers::models::bpe::BPE;
use tokenizers::{AddedToken, Tokenizer};

#[derive(Deserialize)]
struct Doc<'a> {
    model: Model,
    #[serde(borrow, default)]
    added_tokens: Option<&'a RawValue>,
    #[serde(borrow, default)]
    normalizer: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pre_tokenizer: Option<&'a RawValue>,
    #[serde(borrow, default)]
    post_processor: Option<&'a RawValue>,
    #[serde(borrow, default)]
    decoder: Option<&'a RawValue>,
    #[serde(borrow, default)]
    truncation: Option<&'a RawValue>,
    #[serde(borrow, default)]
    padding: Option<&'a RawValue>,
}

/// A BPE model's fields as `tokenizer.json` spells them; any other field refuses the fast path.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Model {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    dropout: Option<f32>,
    #[serde(default)]
    unk_token: Option<String>,
    #[serde(default)]
    continuing_subword_prefix: Option<String>,
    #[serde(default)]
    end_of_word_suffix: Option<String>,
    #[serde(default)]
    fuse_unk: bool,
    #[serde(default)]
    byte_fallback: bool,
    #[serde(default)]
    ignore_merges: bool,
    vocab: HashMap<String, u32>,
    merges: Vec<Merge>,
}

/// One merge: `["a", "b"]`, or the older `"a b"` (then exactly one space, as the crate reads it).
struct Merge(Option<(String, String)>);

impl<'de> Deserialize<'de> for Merge {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Merge;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a merge: [left, right] or \"left right\"")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Merge, A::Error> {
                let a = s.next_element::<String>()?;
                let b = s.next_element::<String>()?;
                let extra = s.next_element::<serde::de::IgnoredAny>()?.is_some();
                Ok(Merge(match (a, b, extra) {
                    (Some(a), Some(b), false) => Some((a, b)),
                    _ => None,
                }))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Merge, E> {
                let mut parts = v.split(' ');
                Ok(Merge(match (parts.next(), parts.next(), parts.next()) {
                    (Some(a), Some(b), None) => Some((a.to_string(), b.to_string())),
                    _ => None,
                }))
            }
        }
        d.deserialize_any(V)
    }
}

/// The tokenizer of `json`, when it is a BPE this path reads; `None` otherwise (and on any
/// error: the crate's own loader then reports it).
pub fn bpe_tokenizer(json: &[u8]) -> Option<Tokenizer> {
    let doc: Doc = serde_json::from_slice(json).ok()?;
    let m = doc.model;
    if m.kind != "BPE" {
        return None;
    }
    let merges: Vec<(String, String)> = m
        .merges
        .into_iter()
        .map(|Merge(p)| p)
        .collect::<Option<_>>()?;
    let vocab: ahash::AHashMap<String, u32> = m.vocab.into_iter().collect();
    let mut b = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .fuse_unk(m.fuse_unk)
        .byte_fallback(m.byte_fallback)
        .ignore_merges(m.ignore_merges);
    if let Some(p) = m.dropout {
        b = b.dropout(p);
    }
    if let Some(u) = m.unk_token {
        b = b.unk_token(u);
    }
    if let Some(p) = m.continuing_subword_prefix {
        b = b.continuing_subword_prefix(p);
    }
    if let Some(s) = m.end_of_word_suffix {
        b = b.end_of_word_suffix(s);
    }
    let bpe = b.build().ok()?;
    // Everything else through the crate, around an empty model; then the real model, then
    // the added tokens (their ids come from the model, as in the crate's loader).
    let raw = |r: Option<&RawValue>| r.map_or("null", |r| r.get()).to_string();
    let shell = format!(
        r#"{{"version":"1.0","truncation":{},"padding":{},"added_tokens":[],"normalizer":{},"pre_tokenizer":{},"post_processor":{},"decoder":{},"model":{{"type":"BPE","vocab":{{}},"merges":[]}}}}"#,
        raw(doc.truncation),
        raw(doc.padding),
        raw(doc.normalizer),
        raw(doc.pre_tokenizer),
        raw(doc.post_processor),
        raw(doc.decoder)
    );
    let mut tok = Tokenizer::from_bytes(shell.as_bytes()).ok()?;
    tok.with_model(bpe);
    let added: Vec<AddedToken> = match doc.added_tokens {
        Some(r) => serde_json::from_str(r.get()).ok()?,
        None => Vec::new(),
    };
    tok.add_tokens(added).ok()?;
    Some(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXTS: [&str; 8] = [
        "Hello world",
        "The capital of France is Paris. 1234567890",
        "def f(x):\n    return x*2  # 123\n\n\n",
        "你好，世界 emoji 🚀🎉 café naïve",
        "  leading spaces\tand tabs",
        "<|im_start|>user\nhi<|im_end|>",
        "<start_of_turn>model\n<end_of_turn>",
        "",
    ];

    /// The same tokenizer as the crate's own loader: vocabulary with added tokens, the ids and
    /// text of every sample (with and without special tokens), for every tokenizer.json in the
    /// fixtures and one built from a GGUF; a vocabulary it does not read falls back.
    #[test]
    fn equals_the_crates_loader() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut jsons: Vec<(String, Vec<u8>)> = Vec::new();
        for dir in ["fixtures/tiny", "fixtures/qat"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path().join("tokenizer.json");
                if p.exists() {
                    jsons.push((p.display().to_string(), std::fs::read(&p).unwrap()));
                }
            }
        }
        let g =
            pocket_formats::gguf::GgufFile::open(&root.join("fixtures/gguf/llama-tiny-q8_0.gguf"))
                .unwrap();
        let from_gguf = pocket_formats::gguf::tokenizer::tokenizer_json(&g).unwrap();
        jsons.push(("llama-tiny-q8_0.gguf".into(), from_gguf.into_bytes()));
        // The older "a b" merge spelling.
        let mut v: serde_json::Value = serde_json::from_slice(&jsons[0].1).unwrap();
        let legacy: Vec<String> = v["model"]["merges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{} {}", m[0].as_str().unwrap(), m[1].as_str().unwrap()))
            .collect();
        v["model"]["merges"] = serde_json::json!(legacy);
        jsons.push(("legacy merges".into(), v.to_string().into_bytes()));
        assert!(jsons.len() >= 10);
        for (name, json) in &jsons {
            let fast = bpe_tokenizer(json).unwrap_or_else(|| panic!("{name}: not read"));
            let slow = Tokenizer::from_bytes(json).unwrap();
            assert_eq!(fast.get_vocab(true), slow.get_vocab(true), "{name}");
            assert_eq!(
                fast.get_added_tokens_decoder(),
                slow.get_added_tokens_decoder(),
                "{name}"
            );
            for t in TEXTS {
                for special in [false, true] {
                    let (a, b) = (
                        fast.encode(t, special).unwrap(),
                        slow.encode(t, special).unwrap(),
                    );
                    assert_eq!(a.get_ids(), b.get_ids(), "{name}: {t:?}");
                    assert_eq!(
                        fast.decode(a.get_ids(), !special).unwrap(),
                        slow.decode(b.get_ids(), !special).unwrap()
                    );
                }
            }
        }
        // Not a BPE it reads: the caller takes the crate's path.
        assert!(bpe_tokenizer(br#"{"model": {"type": "WordPiece", "vocab": {}}}"#).is_none());
        assert!(bpe_tokenizer(b"not json").is_none());
    }
}
