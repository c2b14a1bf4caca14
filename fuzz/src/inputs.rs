//! How a fuzz input becomes the files a command reads. Shared by the fuzz targets and by
//! `tests/fuzz_corpus.rs`, which replays every committed corpus file through the `pocket`
//! binary, so both see exactly the same files.

use std::path::{Path, PathBuf};

/// A decision input is `[kind byte][bytes]`: an even kind byte makes the bytes a System One
/// request (JSON), an odd one a decision head file (safetensors).
pub fn split_decision(data: &[u8]) -> (bool, &[u8]) {
    match data.split_first() {
        Some((k, rest)) => (k % 2 == 0, rest),
        None => (true, data),
    }
}

/// Writes a LoRA adapter input: with `peft`, `[u16 n][adapter_config.json][safetensors]` as a
/// PEFT directory (`dir/peft`), else the bytes as a GGUF file (`dir/adapter.gguf`); returns the
/// path to open.
pub fn write_adapter(peft: bool, data: &[u8], dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    if peft {
        let (config, weights) = split_checkpoint(data);
        let d = dir.join("peft");
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("adapter_config.json"), config)?;
        std::fs::write(d.join("adapter_model.safetensors"), weights)?;
        Ok(d)
    } else {
        let p = dir.join("adapter.gguf");
        std::fs::write(&p, data)?;
        Ok(p)
    }
}

/// A valid tokenizer for checkpoint inputs: the fuzzer then reaches the model loader and the
/// engine instead of stopping at a missing file.
pub const TOKENIZER_JSON: &[u8] = include_bytes!("../../fixtures/tiny/qwen3-tiny/tokenizer.json");
pub const TOKENIZER_CONFIG: &[u8] =
    include_bytes!("../../fixtures/tiny/qwen3-tiny/tokenizer_config.json");

/// An HF checkpoint input is `[u16 LE n][n bytes of config.json][model.safetensors]`.
pub fn split_checkpoint(data: &[u8]) -> (&[u8], &[u8]) {
    if data.len() < 2 {
        return (data, &[]);
    }
    let n = u16::from_le_bytes([data[0], data[1]]) as usize;
    let rest = &data[2..];
    rest.split_at(n.min(rest.len()))
}

/// The inverse of [`split_checkpoint`] (for making seeds).
pub fn join_checkpoint(config: &[u8], weights: &[u8]) -> Vec<u8> {
    let n = u16::try_from(config.len()).expect("config.json under 64 KiB");
    let mut out = n.to_le_bytes().to_vec();
    out.extend_from_slice(config);
    out.extend_from_slice(weights);
    out
}

/// Writes a checkpoint directory; returns its path.
pub fn write_checkpoint(data: &[u8], dir: &Path) -> std::io::Result<PathBuf> {
    let (config, weights) = split_checkpoint(data);
    let ckpt = dir.join("ckpt");
    std::fs::create_dir_all(&ckpt)?;
    std::fs::write(ckpt.join("config.json"), config)?;
    std::fs::write(ckpt.join("model.safetensors"), weights)?;
    std::fs::write(ckpt.join("tokenizer.json"), TOKENIZER_JSON)?;
    std::fs::write(ckpt.join("tokenizer_config.json"), TOKENIZER_CONFIG)?;
    Ok(ckpt)
}

/// A `.pocket` input with its header checksum recomputed when the prefix makes that possible,
/// so the fuzzer explores the header JSON and the tensor table instead of dying at the checksum.
pub fn fix_pocket_checksum(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    if out.len() >= 32 {
        let len = u64::from_le_bytes(out[16..24].try_into().expect("8 bytes"));
        if len <= (out.len() - 32) as u64 {
            let sum = xxhash_rust::xxh3::xxh3_64(&out[32..32 + len as usize]);
            out[24..32].copy_from_slice(&sum.to_le_bytes());
        }
    }
    out
}

/// An eval-logs input is up to four results logs (parts of a run, `pocket eval merge`'s
/// input) separated by 0xFF bytes, which UTF-8 text never holds.
pub fn split_logs(data: &[u8]) -> Vec<&[u8]> {
    data.split(|&b| b == 0xFF).take(4).collect()
}

/// Writes a single-file model (`.pocket` or GGUF); returns its path.
pub fn write_file(data: &[u8], dir: &Path, name: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    std::fs::write(&path, data)?;
    Ok(path)
}

/// A scratch directory for this process (under `$TMPDIR`; use a tmpfs for speed).
pub fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pocket-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A structured-output input is one selector byte, then the text: a JSON schema, a grammar
/// (Lark or GBNF), a regex, a tools file or a comma-separated choice list. Returns the `pocket
/// run` flag that reads it and the text.
pub fn split_structured(data: &[u8]) -> (&'static str, &[u8]) {
    let Some((&kind, text)) = data.split_first() else {
        return ("--json-schema", data);
    };
    let flag = match kind % 5 {
        0 => "--json-schema",
        1 => "--grammar",
        2 => "--regex",
        3 => "--tools",
        _ => "--choices",
    };
    (flag, text)
}

/// The inverse of [`split_structured`] (for making seeds).
pub fn join_structured(flag: &str, text: &[u8]) -> Vec<u8> {
    let kind = [
        "--json-schema",
        "--grammar",
        "--regex",
        "--tools",
        "--choices",
    ]
    .iter()
    .position(|f| *f == flag)
    .expect("a structured-output flag") as u8;
    let mut out = vec![kind];
    out.extend_from_slice(text);
    out
}
