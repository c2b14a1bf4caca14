//! `tokenizer.txt` in MNN's text format, type 3 (Hugging Face byte-level BPE): a header
//! `430 3`, the counts and ids of special, stop and prefix tokens, then one vocabulary line
//! per id (the token as tokenizer.json spells it, e.g. `Ġthe`) and one merge per line.

use serde_json::Value;

/// Writes the file's text from tokenizer.json. `stop` are the ids that end generation.
pub fn tokenizer_txt(tj: &Value, vocab_size: usize, stop: &[u32]) -> Result<String, String> {
    let model = &tj["model"];
    if model["type"] != "BPE" {
        return Err("MNN export supports byte-level BPE tokenizers only".into());
    }
    let mut tokens: Vec<Option<String>> = vec![None; vocab_size];
    let vocab = model["vocab"]
        .as_object()
        .ok_or("tokenizer.json has no model.vocab")?;
    for (tok, id) in vocab {
        if let Some(slot) = id.as_u64().and_then(|i| tokens.get_mut(i as usize)) {
            *slot = Some(tok.clone());
        }
    }
    let mut special = Vec::new();
    for a in tj["added_tokens"].as_array().into_iter().flatten() {
        if let (Some(id), Some(content)) = (a["id"].as_u64(), a["content"].as_str()) {
            if let Some(slot) = tokens.get_mut(id as usize) {
                *slot = Some(content.to_string());
                // Added tokens are matched whole before BPE, special or not.
                special.push(id as u32);
            }
        }
    }
    let merges: Vec<String> = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m {
            Value::String(s) => Some(s.clone()),
            Value::Array(p) => Some(format!("{} {}", p.first()?.as_str()?, p.get(1)?.as_str()?)),
            _ => None,
        })
        .collect();
    let mut out = String::new();
    let ids = |v: &[u32]| v.iter().map(|i| format!("{i} ")).collect::<String>();
    out.push_str("430 3\n");
    out.push_str(&format!("{} {} 0\n", special.len(), stop.len()));
    out.push_str(&format!("{}{}\n", ids(&special), ids(stop)));
    out.push_str(&format!("{} {}\n", vocab_size, merges.len()));
    for (i, t) in tokens.iter().enumerate() {
        // Ids the tokenizer leaves undefined (a vocabulary padded for alignment).
        let t = t.as_deref().unwrap_or("<unk>");
        if t.contains(['\n', '\r']) || (t.contains(' ') && !special.contains(&(i as u32))) {
            return Err(format!(
                "token {i} ({t:?}) holds a space or line break: not a byte-level BPE vocabulary"
            ));
        }
        out.push_str(t);
        out.push('\n');
    }
    for m in &merges {
        if m.split(' ').count() != 2 || m.contains('\n') {
            return Err(format!("merge {m:?} is not two tokens"));
        }
        out.push_str(m);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_vocabulary_and_merges() {
        let tj = serde_json::json!({
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġa": 3},
                      "merges": ["a b", ["Ġ", "a"]]},
            "added_tokens": [{"id": 4, "content": "<|im_end|>", "special": true}]
        });
        let t = tokenizer_txt(&tj, 6, &[4]).unwrap();
        assert_eq!(
            t,
            "430 3\n1 1 0\n4 4 \n6 2\na\nb\nab\nĠa\n<|im_end|>\n<unk>\na b\nĠ a\n"
        );
    }

    #[test]
    fn refuses_what_the_format_cannot_hold() {
        let tj = serde_json::json!({"model": {"type": "Unigram", "vocab": []}});
        assert!(tokenizer_txt(&tj, 2, &[]).is_err());
        let tj = serde_json::json!({"model": {"type": "BPE", "vocab": {"a\nb": 0}, "merges": []}});
        assert!(tokenizer_txt(&tj, 1, &[])
            .unwrap_err()
            .contains("line break"));
    }
}
