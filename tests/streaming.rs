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
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

fn check_tokenizer(path: &Path) {
    let tok = TextTokenizer::from_file(path).unwrap();
    let mut split_chars = 0;
    for text in SAMPLES {
        // The fixtures' tokenizers are byte-level BPE: decoding gives the text back.
        assert_eq!(
            tok.decode(&tok.encode(text, false).unwrap(), true),
            text,
            "{}",
            path.display()
        );
        split_chars += check_stream(&tok, text);
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

/// The real SmolLM2 tokenizer (models/ is not in the repository: `scripts/demo.sh` fetches
/// it). Run with `cargo test --test streaming -- --ignored`.
#[test]
#[ignore]
fn smollm2_tokenizer_streams_whole_characters() {
    check_tokenizer(&root().join("models/smollm2-135m-instruct/tokenizer.json"));
}
