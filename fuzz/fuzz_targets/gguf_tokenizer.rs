//! The tokenizer built from a GGUF's `tokenizer.ggml.*` metadata: vocabulary, merges, token
//! types, pre-tokenizer, special ids; then encoding and decoding text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pocket::tokenizer::TextTokenizer;
use pocket_formats::gguf::{tokenizer, GgufFile};
use pocket_fuzz::inputs;

fuzz_target!(|data: &[u8]| {
    let path = inputs::write_file(data, &inputs::scratch(), "tok.gguf").expect("scratch write");
    let Ok(f) = GgufFile::open(&path) else { return };
    let Ok(json) = tokenizer::tokenizer_json(&f) else {
        return;
    };
    let Ok(tok) = TextTokenizer::from_bytes(json.as_bytes(), &path) else {
        return;
    };
    for text in ["Hello, world!", "中文 emoji 🙂 code: fn main() {}", ""] {
        if let Ok(ids) = tok.encode(text, true) {
            let _ = tok.decode(&ids, false);
        }
    }
    let _ = tok.decode(&[0, 1, 2, u32::MAX], true);
    let _ = tokenizer::token_text(&f, "tokenizer.ggml.eos_token_id");
});
