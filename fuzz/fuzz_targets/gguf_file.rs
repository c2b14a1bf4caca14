//! A GGUF file: header, metadata of every value type, tensor infos, the architecture mapping,
//! the tokenizer and chat template it carries, then two tokens run.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pocket_fuzz::inputs;

fuzz_target!(|data: &[u8]| {
    let path = inputs::write_file(data, &inputs::scratch(), "model.gguf").expect("scratch write");
    pocket_fuzz::exercise(&path);
});
