//! `tokenizer.mtok`: MNN's "pipeline" tokenizer (type 4), the format MNN 3.6's exporter writes.
//! Unlike `tokenizer.txt` it carries the tokenizer.json pipeline itself (the pre-tokenizer's
//! regex, digit splitting, the decoder), so MNN splits text as the model's tokenizer does.
//! Layout (MNN's `export_mtok`): three text lines (`430 4`, the special/stop/prefix counts, their
//! ids), then little-endian binary: normalizer, pre-tokenizer, BPE model (vocabulary sorted by
//! token bytes, merges sorted by `(id1 << 32) | id2`), decoder, added tokens, chat template,
//! eos, flags, bos. Strings are a u16 length and UTF-8 bytes.
//!
//! Written for what byte-level BPE checkpoints use; anything else (a normalizer, a Unigram or
//! WordPiece model, an unknown pre-tokenizer) returns `None` and the caller falls back to
//! `tokenizer.txt`.

use serde_json::Value;

/// What goes after the tokenizer pipeline.
pub struct Trailer<'a> {
    pub chat_template: &'a str,
    pub eos: &'a str,
    pub bos: &'a str,
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Option<()> {
    let len = u16::try_from(s.len()).ok()?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Some(())
}

fn u32s(out: &mut Vec<u8>, v: &[u32]) {
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

fn flag(v: &Value, key: &str, default: bool) -> u8 {
    v.get(key).and_then(Value::as_bool).unwrap_or(default) as u8
}

fn pre_tokenizer(out: &mut Vec<u8>, pt: &Value) -> Option<()> {
    if pt.is_null() {
        out.push(0);
        return Some(());
    }
    match pt["type"].as_str()? {
        "ByteLevel" => out.extend_from_slice(&[1, flag(pt, "use_regex", true)]),
        "Digits" => out.extend_from_slice(&[2, flag(pt, "individual_digits", false)]),
        "Split" => {
            out.push(4);
            let pattern = match &pt["pattern"] {
                Value::Object(o) => o.get("Regex").or_else(|| o.get("String"))?.as_str()?,
                Value::String(s) => s,
                _ => return None,
            };
            put_str(out, pattern)?;
            let behavior = match pt["behavior"].as_str().unwrap_or("Isolated") {
                "Isolated" => 0,
                "MergedWithPrevious" => 2,
                _ => 1,
            };
            out.extend_from_slice(&[flag(pt, "invert", false), behavior]);
        }
        "Sequence" => {
            let items = pt["pretokenizers"].as_array()?;
            out.push(6);
            u32s(out, &[items.len() as u32]);
            for p in items {
                pre_tokenizer(out, p)?;
            }
        }
        _ => return None,
    }
    Some(())
}

fn decoder(out: &mut Vec<u8>, d: &Value) -> Option<()> {
    if d.is_null() {
        out.push(0);
        return Some(());
    }
    match d["type"].as_str()? {
        "ByteLevel" => out.push(0),
        "ByteFallback" => out.push(1),
        "Fuse" => out.push(4),
        "Sequence" => {
            let items = d["decoders"].as_array()?;
            out.push(7);
            u32s(out, &[items.len() as u32]);
            for x in items {
                decoder(out, x)?;
            }
        }
        _ => return None,
    }
    Some(())
}

/// The whole file, or `None` when the tokenizer uses something this writer does not encode.
pub fn tokenizer_mtok(tj: &Value, stop: &[u32], prefix: &[u32], t: &Trailer) -> Option<Vec<u8>> {
    if !tj["normalizer"].is_null() || tj["model"]["type"] != "BPE" {
        return None;
    }
    let model = &tj["model"];
    let vocab = model["vocab"].as_object()?;
    let added = tj["added_tokens"].as_array().cloned().unwrap_or_default();
    let special: Vec<u32> = added
        .iter()
        .filter(|a| a["special"].as_bool() == Some(true))
        .filter_map(|a| a["id"].as_u64().map(|i| i as u32))
        .collect();
    let ids: Vec<String> = special
        .iter()
        .chain(stop)
        .chain(prefix)
        .map(|i| i.to_string())
        .collect();
    let mut out = format!(
        "430 4\n{} {} {}\n{}\n",
        special.len(),
        stop.len(),
        prefix.len(),
        ids.join(" ")
    )
    .into_bytes();

    out.push(0); // no normalizer
    let pt = &tj["pre_tokenizer"];
    pre_tokenizer(&mut out, pt)?;

    // byte_level marks a byte-level model whose pre-tokenizer is not ByteLevel itself.
    let has = |v: &Value, list: &str, ty: &str| {
        v["type"] == ty
            || v[list]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["type"] == ty))
    };
    let byte_level = pt["type"] == "Sequence"
        && !has(pt, "pretokenizers", "ByteLevel")
        && has(&tj["decoder"], "decoders", "ByteLevel");
    let mut sorted: Vec<(&String, u32)> = vocab
        .iter()
        .map(|(k, v)| Some((k, v.as_u64()? as u32)))
        .collect::<Option<_>>()?;
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let merges = model["merges"].as_array().cloned().unwrap_or_default();
    out.push(0); // BPE
    u32s(&mut out, &[sorted.len() as u32]);
    out.extend_from_slice(&[flag(model, "byte_fallback", false), byte_level as u8]);
    u32s(&mut out, &[merges.len() as u32]);
    for (tok, id) in &sorted {
        put_str(&mut out, tok)?;
        u32s(&mut out, &[*id]);
    }
    let id_of = |s: &str| {
        vocab
            .get(s)
            .and_then(Value::as_u64)
            .map_or(u32::MAX, |i| i as u32)
    };
    let mut pairs: Vec<(u32, u32, u32)> = Vec::with_capacity(merges.len());
    for (rank, m) in merges.iter().enumerate() {
        let (a, b) = match m {
            Value::String(s) => s.split_once(' ')?,
            Value::Array(p) => (p.first()?.as_str()?, p.get(1)?.as_str()?),
            _ => return None,
        };
        pairs.push((id_of(a), id_of(b), rank as u32));
    }
    pairs.sort_by_key(|&(a, b, _)| ((a as u64) << 32) | b as u64);
    for (a, b, r) in pairs {
        u32s(&mut out, &[a, b, r]);
    }
    decoder(&mut out, &tj["decoder"])?;

    u32s(&mut out, &[added.len() as u32]);
    for a in &added {
        u32s(&mut out, &[a["id"].as_u64()? as u32]);
        out.extend_from_slice(&[
            flag(a, "special", false),
            flag(a, "lstrip", false),
            flag(a, "rstrip", false),
        ]);
        put_str(&mut out, a["content"].as_str()?)?;
    }
    u32s(&mut out, &[t.chat_template.len() as u32]);
    out.extend_from_slice(t.chat_template.as_bytes());
    put_str(&mut out, t.eos)?;
    out.push(0); // flags: clean_up_tokenization_spaces off
    put_str(&mut out, t.bos)?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_a_small_tokenizer() {
        let tj = serde_json::json!({
            "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                {"type": "ByteLevel", "use_regex": true}]},
            "model": {"type": "BPE", "vocab": {"b": 1, "a": 0, "ab": 2}, "merges": ["a b"]},
            "decoder": {"type": "ByteLevel"},
            "added_tokens": [{"id": 3, "content": "<e>", "special": true}]
        });
        let t = Trailer {
            chat_template: "T",
            eos: "<e>",
            bos: "",
        };
        let b = tokenizer_mtok(&tj, &[3], &[], &t).unwrap();
        let head = b"430 4\n1 1 0\n3 3\n";
        assert_eq!(&b[..head.len()], head);
        let body = &b[head.len()..];
        let want: Vec<u8> = [
            &[0u8][..],                         // normalizer
            &[6, 2, 0, 0, 0, 2, 1, 1, 1],       // Sequence[Digits(1), ByteLevel(1)]
            &[0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0], // BPE, 3 tokens, flags, 1 merge
            &[1, 0, b'a', 0, 0, 0, 0],          // sorted by bytes: a, ab, b
            &[2, 0, b'a', b'b', 2, 0, 0, 0],
            &[1, 0, b'b', 1, 0, 0, 0],
            &[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], // merge (0, 1) rank 0
            &[0],                                  // ByteLevel decoder
            &[1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 3, 0, b'<', b'e', b'>'],
            &[1, 0, 0, 0, b'T', 3, 0, b'<', b'e', b'>', 0, 0, 0],
        ]
        .concat();
        assert_eq!(body, &want[..]);
    }

    #[test]
    fn anything_else_falls_back() {
        let tj = serde_json::json!({"normalizer": {"type": "NFC"}, "model": {"type": "BPE"}});
        let t = Trailer {
            chat_template: "",
            eos: "",
            bos: "",
        };
        assert!(tokenizer_mtok(&tj, &[], &[], &t).is_none());
    }
}
