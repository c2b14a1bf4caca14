//! An HF checkpoint: config.json + model.safetensors (header, tensor table, bytes) paired into a
//! model spec and loaded, then two tokens run.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pocket_fuzz::inputs;

fuzz_target!(|data: &[u8]| {
    let dir = inputs::scratch();
    let ckpt = inputs::write_checkpoint(data, &dir).expect("scratch write");
    pocket_fuzz::exercise(&ckpt);
});
