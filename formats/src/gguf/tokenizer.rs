//! A Hugging Face `tokenizer.json` built from GGUF tokenizer metadata (`tokenizer.ggml.*`), for
//! byte-level BPE ("gpt2") vocabularies and Gemma's SentencePiece ("llama") one. The pre-tokenizer comes from `tokenizer.ggml.pre`: the
//! names llama.cpp uses map to the split rules those models were trained with; an unknown name
//! is refused rather than guessed, since a wrong split silently changes every token id.

use super::reader::{GgufFile, GgufValue};
use crate::FormatError;
use serde_json::{json, Value};

const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer for a `tokenizer.ggml.pre` value.
fn pre_tokenizer(pre: &str) -> Option<Value> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
    Some(match pre {
        // SmolLM / SmolLM2: every digit alone, then GPT-2's byte-level split.
        "smollm" => {
            json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]})
        }
        "gpt-2" | "gpt2" | "default" => {
            json!({"type": "Sequence", "pretokenizers": [split(GPT2_PATTERN), byte_level(false)]})
        }
        "llama-bpe" | "llama3" => {
            json!({"type": "Sequence", "pretokenizers": [split(LLAMA3_PATTERN), byte_level(false)]})
        }
        "qwen2" => {
            json!({"type": "Sequence", "pretokenizers": [split(QWEN2_PATTERN), byte_level(false)]})
        }
        _ => return None,
    })
}

pub const KNOWN_PRE: &str = "smollm, gpt-2, llama-bpe, qwen2";

fn strings<'a>(f: &'a GgufFile, key: &str) -> Result<Vec<&'a str>, FormatError> {
    let bad = || FormatError::InvalidField {
        path: f.path.clone(),
        field: key.into(),
        reason: "expected an array of strings".into(),
    };
    f.get(key)
        .and_then(GgufValue::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|v| v.as_str().ok_or_else(bad))
        .collect()
}

/// `tokenizer.json` text for the file's vocabulary.
pub fn tokenizer_json(f: &GgufFile) -> Result<String, FormatError> {
    let invalid = |field: &str, reason: String| FormatError::InvalidField {
        path: f.path.clone(),
        field: field.into(),
        reason,
    };
    let model = f
        .get("tokenizer.ggml.model")
        .and_then(GgufValue::as_str)
        .unwrap_or("");
    let gemma = super::model::family(f) == Some(crate::hf::Family::Gemma3);
    match model {
        "gpt2" => {}
        "llama" if gemma => {}
        _ => {
            return Err(invalid(
                "tokenizer.ggml.model",
                format!("`{model}` is not supported (byte-level BPE \"gpt2\", or Gemma's SentencePiece \"llama\")"),
            ))
        }
    }
    let pre_name = f
        .get("tokenizer.ggml.pre")
        .and_then(GgufValue::as_str)
        .unwrap_or("default");
    let pre = match model {
        "llama" => Some(json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false})),
        _ => pre_tokenizer(pre_name),
    }
    .ok_or_else(|| {
        invalid(
            "tokenizer.ggml.pre",
            format!("`{pre_name}` is not a known pre-tokenizer ({KNOWN_PRE}); refusing to guess"),
        )
    })?;
    let mut tokens: Vec<String> = strings(f, "tokenizer.ggml.tokens")?
        .into_iter()
        .map(str::to_string)
        .collect();
    let spm = model == "llama";
    if spm {
        // Gemma stores its runs of spaces as spaces; its normalizer looks them up as "▁"s.
        for t in &mut tokens {
            if t.contains(' ') && t.trim().is_empty() {
                *t = "▁".repeat(t.chars().count());
            }
        }
    }
    let merges: Vec<Value> = if spm {
        spm_merges(&tokens).ok_or_else(|| {
            invalid(
                "tokenizer.ggml.tokens",
                format!("tokens too long to rebuild merges from (more than {MERGE_WORK} bytes of splits)"),
            )
        })?
    } else {
        strings(f, "tokenizer.ggml.merges")?
            .into_iter()
            .map(Value::from)
            .collect()
    };
    let types: Vec<u64> = match f
        .get("tokenizer.ggml.token_type")
        .and_then(GgufValue::as_array)
    {
        Some(a) if a.len() == tokens.len() => a.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
        Some(a) => {
            return Err(invalid(
                "tokenizer.ggml.token_type",
                format!("{} entries for {} tokens", a.len(), tokens.len()),
            ))
        }
        None => vec![1; tokens.len()],
    };
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, (tok, &ty)) in tokens.iter().zip(&types).enumerate() {
        vocab.insert(tok.clone(), json!(id));
        // 3 = control, 4 = user-defined: matched whole before BPE, as HF's added tokens are
        // (not Gemma's runs of spaces, which its BPE builds).
        if ty == 3 || (ty == 4 && !(spm && tok.starts_with('▁'))) {
            added.push(json!({"id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                              "normalized": ty == 4 && !spm, "special": ty == 3}));
        }
    }
    let id = |k: &str| f.get(k).and_then(GgufValue::as_u64);
    let post = match (
        f.get("tokenizer.ggml.add_bos_token")
            .and_then(GgufValue::as_bool),
        id("tokenizer.ggml.bos_token_id"),
    ) {
        (Some(true), Some(bos)) => {
            let bos_tok = tokens
                .get(bos as usize)
                .map(String::as_str)
                .ok_or_else(|| {
                    invalid(
                        "tokenizer.ggml.bos_token_id",
                        format!("{bos} is not a token id"),
                    )
                })?;
            json!({"type": "TemplateProcessing",
                   "single": [{"SpecialToken": {"id": bos_tok, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                   "pair": [{"SpecialToken": {"id": bos_tok, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                            {"SpecialToken": {"id": bos_tok, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                   "special_tokens": {bos_tok.to_string(): {"id": bos_tok, "ids": [bos], "tokens": [bos_tok]}}})
        }
        _ => Value::Null,
    };
    let mut tj = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    });
    if spm {
        // As transformers' GemmaTokenizer: spaces become "▁", unknown characters fall back
        // to byte tokens, and decoding undoes both.
        let unk = id("tokenizer.ggml.unknown_token_id")
            .and_then(|u| tokens.get(u as usize))
            .cloned();
        tj["normalizer"] = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
        tj["decoder"] = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]});
        tj["model"]["unk_token"] = json!(unk);
        tj["model"]["fuse_unk"] = json!(true);
        tj["model"]["byte_fallback"] = json!(true);
    }
    Ok(tj.to_string())
}

/// A SentencePiece vocabulary's merges, which a GGUF file does not list: every split of a
/// token into two tokens, best first. As transformers rebuilds Gemma's: a token's place in the
/// file ranks its merges (Gemma's scores do not follow the merge order), then the longer left
/// piece, then the longer right piece.
/// The most bytes of token splits [`spm_merges`] hashes (Gemma 3's vocabulary takes about 30
/// million); a file asking for more is refused rather than left to run for hours.
const MERGE_WORK: usize = 1 << 30;

fn spm_merges(tokens: &[String]) -> Option<Vec<Value>> {
    let work = tokens.iter().try_fold(0usize, |w, t| {
        w.checked_add(t.chars().count().checked_mul(t.len())?)
    })?;
    if work > MERGE_WORK {
        return None;
    }
    let index: std::collections::HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut merges: Vec<(usize, usize, usize, &str, &str)> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        // Ranked by the last place a respelled token holds, as a dict keeps the last value.
        if index.get(t.as_str()) != Some(&i) {
            continue;
        }
        for (at, _) in t.char_indices().skip(1) {
            let (l, r) = t.split_at(at);
            if index.contains_key(l) && index.contains_key(r) {
                merges.push((i, l.chars().count(), r.chars().count(), l, r));
            }
        }
    }
    merges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    Some(
        merges
            .into_iter()
            .map(|(_, _, _, l, r)| json!([l, r]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merges rank by the merged token's place in the file, then the longer left piece; runs
    /// of tokens too long to split in reasonable time are refused.
    #[test]
    fn spm_merges_follow_the_file_order_and_refuse_huge_tokens() {
        let toks: Vec<String> = ["a", "b", "c", "abc", "ab", "bc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let m = spm_merges(&toks).unwrap();
        assert_eq!(
            m,
            vec![
                json!(["ab", "c"]),
                json!(["a", "bc"]),
                json!(["a", "b"]),
                json!(["b", "c"])
            ]
        );
        let huge = vec!["x".repeat(40_000)];
        assert!(spm_merges(&huge).is_none());
    }
}

/// The text of a special token id (`tokenizer.ggml.bos_token_id` etc.).
pub fn token_text(f: &GgufFile, key: &str) -> Option<String> {
    let id = f.get(key)?.as_u64()? as usize;
    f.get("tokenizer.ggml.tokens")?
        .as_array()?
        .get(id)?
        .as_str()
        .map(str::to_string)
}
