//! `pocket quantize/export --size` and `--bpw`: the file fits the size asked for, the choice is
//! recorded in the file, spending the bytes by measured sensitivity loses less than a uniform
//! recipe of the same size (measured on text the choice never saw), and a larger budget never
//! loses more.

use crate::common::{self, pocket, tiny as fixture};
use std::path::Path;

fn kl(build: &Path, source: &Path) -> f64 {
    common::kl_on_readme(build, source)
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn a_size_budget_fits_and_loses_less_than_a_uniform_recipe() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["qwen2-tiny", "llama-tiny"] {
        let src = fixture(name);
        let uniform = tmp.path().join(format!("{name}-uniform.pocket"));
        common::quantize(&src, &uniform, &[]);
        let budget = size(&uniform);
        let fitted = tmp.path().join(format!("{name}-fitted.pocket"));
        let report = common::quantize(&src, &fitted, &["--size", &format!("{budget}B")]);
        assert!(
            size(&fitted) <= budget,
            "{name}: {} > {budget}",
            size(&fitted)
        );
        // The recipe written (and returned) holds the budget and one type per weight matrix.
        let recipe = &report["recipe"];
        assert_eq!(recipe["budget"]["target_bytes"].as_u64(), Some(budget));
        let matrices = report["report"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["shape"].as_array().unwrap().len() == 2)
            .count();
        assert_eq!(recipe["overrides"].as_array().unwrap().len(), matrices);
        let measured = report["drift_from_source"]["kl_mean"].as_f64().unwrap();
        assert!(measured > 0.0);
        let (k_uniform, k_fitted) = (kl(&uniform, &src), kl(&fitted, &src));
        assert!(
            k_fitted < k_uniform,
            "{name}: KL {k_fitted} with the size budget, {k_uniform} uniform at {budget} bytes"
        );
        // The file says how it was made.
        let o = common::pocket_ok(&["inspect", fitted.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("size budget"), "{text}");
    }
}

#[test]
fn more_bits_per_parameter_never_lose_more() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("qwen3-tiny");
    // The tokenizer and header weigh a lot beside a tiny model's weights: budgets from the
    // default recipe's bits per parameter up.
    let uniform = tmp.path().join("uniform.pocket");
    let r = common::quantize(&src, &uniform, &[]);
    let params = r["report"]["parameters"].as_u64().unwrap() as f64;
    let base = size(&uniform) as f64 * 8.0 / params;
    let mut last = f64::INFINITY;
    for extra in [0.0, 0.5, 2.0] {
        let bpw = format!("{:.3}", base + extra);
        let out = tmp.path().join(format!("{bpw}.pocket"));
        common::quantize(&src, &out, &["--bpw", &bpw]);
        let bits = size(&out) as f64 * 8.0 / params;
        assert!(bits <= bpw.parse::<f64>().unwrap(), "--bpw {bpw}: {bits}");
        let k = kl(&out, &src);
        assert!(k <= last * 1.02, "--bpw {bpw}: KL {k} after {last}");
        last = k;
    }
}

#[test]
fn sizes_that_cannot_be_met_or_conflict_are_refused_with_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("qwen2-tiny");
    let out = tmp.path().join("m.pocket");
    let cases: &[(&[&str], &str)] = &[
        (&["--size", "20KB"], "the smallest types"),
        (&["--size", "12 parsecs"], "unknown unit"),
        (&["--size", "abc"], "not a size"),
        (&["--bpw", "0.5"], "between 1 and 32"),
        (&["--size", "1MB", "--quant", "q8"], "drop --quant"),
        (&["--size", "1MB", "--calib", "none"], "calibration text"),
        (&["--size", "1MB", "--bpw", "5"], "cannot be used with"),
    ];
    for (extra, want) in cases {
        let mut args = vec![
            "quantize",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = pocket(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?} succeeded");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "{extra:?} left a file"
        );
    }
    let o = pocket(&[
        "export",
        src.to_str().unwrap(),
        "-o",
        out.with_extension("gguf").to_str().unwrap(),
        "--format",
        "gguf",
        "--size",
        "1MB",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("takes one --quant type"));
}

#[test]
fn a_kept_sensitivity_gives_the_same_choice_and_refuses_another_model() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("qwen2-tiny");
    let saved = tmp.path().join("sens.json");
    let s = saved.to_str().unwrap();
    let (a, b) = (tmp.path().join("a.pocket"), tmp.path().join("b.pocket"));
    common::quantize(&src, &a, &["--bpw", "6", "--sensitivity", s]);
    assert!(saved.is_file());
    common::quantize(&src, &b, &["--bpw", "6", "--sensitivity", s]);
    // Measured once, reused: the same types, so the same tensors bit for bit.
    let (ra, rb) = (
        pocket_formats::pocket::reader::PocketFile::open(&a).unwrap(),
        pocket_formats::pocket::reader::PocketFile::open(&b).unwrap(),
    );
    let hashes = |p: &pocket_formats::pocket::reader::PocketFile| -> Vec<(String, String)> {
        p.header
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.xxh3.clone()))
            .collect()
    };
    assert_eq!(hashes(&ra), hashes(&rb));
    // Another model's measurement is refused, naming the file.
    let o = pocket(&[
        "quantize",
        fixture("llama-tiny").to_str().unwrap(),
        "-o",
        tmp.path().join("c.pocket").to_str().unwrap(),
        "--bpw",
        "6",
        "--sensitivity",
        s,
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("measured for another model") && err.contains("sens.json"),
        "{err}"
    );
    // So is a file that is not one.
    std::fs::write(&saved, b"{not json").unwrap();
    let o = pocket(&[
        "quantize",
        src.to_str().unwrap(),
        "-o",
        b.to_str().unwrap(),
        "--bpw",
        "6",
        "--sensitivity",
        s,
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a --sensitivity file"));
}

/// A kept measurement is matched by its calibration text's content, not its path: the same
/// text under another name reuses it (the same choice), and the file edited in place is
/// refused, naming both.
#[test]
fn a_kept_sensitivity_follows_the_calibration_texts_content() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("qwen2-tiny");
    let saved = tmp.path().join("sens.json");
    let s = saved.to_str().unwrap();
    let text = "The quick brown fox jumps over the lazy dog. 12 + 30 = 42.\n".repeat(40);
    let (calib, copy) = (tmp.path().join("calib.txt"), tmp.path().join("copy.txt"));
    std::fs::write(&calib, &text).unwrap();
    std::fs::write(&copy, &text).unwrap();
    let (a, b) = (tmp.path().join("a.pocket"), tmp.path().join("b.pocket"));
    let with = |calib: &std::path::Path| {
        vec![
            "--bpw".to_string(),
            "6".into(),
            "--calib".into(),
            calib.to_str().unwrap().into(),
            "--sensitivity".into(),
            s.into(),
        ]
    };
    let args = with(&calib);
    let first = common::quantize(
        &src,
        &a,
        &args.iter().map(|x| x.as_str()).collect::<Vec<_>>(),
    );
    let measured = std::fs::read(&saved).unwrap();
    let args = with(&copy);
    let report = common::quantize(
        &src,
        &b,
        &args.iter().map(|x| x.as_str()).collect::<Vec<_>>(),
    );
    assert_eq!(
        std::fs::read(&saved).unwrap(),
        measured,
        "reused, not measured again"
    );
    let dtypes = |r: &serde_json::Value| -> Vec<String> {
        r["report"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["dtype"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(dtypes(&report), dtypes(&first), "the same choice");
    assert!(
        dtypes(&first).iter().any(|d| d != "q8_b64"),
        "a choice was made"
    );
    // The text edited at the same path is another calibration.
    std::fs::write(&calib, text.replace("fox", "cat")).unwrap();
    let args = with(&calib);
    let mut cmd = vec!["quantize", src.to_str().unwrap(), "-o"];
    let c = tmp.path().join("c.pocket");
    cmd.push(c.to_str().unwrap());
    cmd.extend(args.iter().map(|x| x.as_str()));
    let o = pocket(&cmd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && !c.exists(), "{err}");
    assert!(
        err.contains("sens.json") && err.contains("its text has changed since"),
        "{err}"
    );
}

/// The sensitivity probes enter the layer stack at their matrix's layer, from the stream a
/// whole pass kept there (`Model::forward_entering`): on the exact path and the default int8
/// path, of every tiny family, the logits equal a whole pass's bit for bit at every layer
/// (the number of layers: only the final norm and head), and still do with a matrix of that
/// layer changed (swapped with the next layer's) against a whole pass of the changed model;
/// a stream of the wrong length or a layer past the end is refused.
#[test]
fn a_probe_entering_at_its_layer_gives_a_whole_passs_logits() {
    use pocket::model::Logits;
    for name in ["qwen2-tiny", "gemma3-tiny", "llama-tiny"] {
        let dir = common::root().join("fixtures/tiny").join(name);
        for exact in [true, false] {
            let mut m = if exact {
                common::open_exact(&dir)
            } else {
                common::open(&dir)
            }
            .expect("open fixture");
            let tokens: Vec<u32> = (0..23u32).map(|i| (i * 37 + 5) % 200).collect();
            let whole = |m: &pocket::model::Model| {
                let mut st = m.new_state(tokens.len());
                m.forward_batch(&mut st, &tokens, Logits::All).unwrap()
            };
            let (logits, streams) = m.model.forward_recorded(&tokens).unwrap();
            let layers = m.model.layers.len();
            assert_eq!(streams.len(), layers + 1, "{name}");
            assert_eq!(logits, whole(&m.model), "{name}: the recording pass");
            for l in 0..=layers {
                let got = m.model.forward_entering(&tokens, l, &streams[l]).unwrap();
                assert_eq!(got, logits, "{name} exact {exact}: entering layer {l}");
            }
            // Layer l's o_proj swapped with layer l + 1's: a different model from layer l up.
            for l in 0..layers - 1 {
                let (lo, hi) = m.model.layers.split_at_mut(l + 1);
                std::mem::swap(&mut lo[l].o_proj, &mut hi[0].o_proj);
                let changed = whole(&m.model);
                assert_ne!(changed, logits, "{name}: the swap changes the model");
                let got = m.model.forward_entering(&tokens, l, &streams[l]).unwrap();
                assert_eq!(got, changed, "{name} exact {exact}: changed layer {l}");
                let (lo, hi) = m.model.layers.split_at_mut(l + 1);
                std::mem::swap(&mut lo[l].o_proj, &mut hi[0].o_proj);
            }
            let short = &streams[0][1..];
            let e = m.model.forward_entering(&tokens, 0, short).unwrap_err();
            assert!(e.to_string().contains("entering layer 0"), "{e}");
            let e = m
                .model
                .forward_entering(&tokens, layers + 1, &streams[0])
                .unwrap_err();
            assert!(e.to_string().contains(&format!("of {layers}")), "{e}");
        }
    }
}
