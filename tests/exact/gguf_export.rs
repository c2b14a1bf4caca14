//! `pocket export --format gguf`: what llama.cpp needs to find, checked by reading the file back
//! and running it against transformers' reference; and our Q4 carried into Q4_0/Q4_1 unchanged.
//! (The comparison with llama.cpp itself is scripts/check-gguf-llamacpp.sh.)

use pocket::loader::ModelFile;
use pocket_formats::gguf::{GgmlType, GgufFile};
use serde_json::Value;

use crate::common;
use common::root;

fn pocket(args: &[&str]) -> Value {
    let o = crate::common::pocket_ok(args);
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

/// `pocket export SRC -o OUT --format gguf --quant f32`.
fn export_f32(src: &std::path::Path, out: &std::path::Path) {
    let (src, out) = (src.to_str().unwrap(), out.to_str().unwrap());
    pocket(&[
        "export", src, "-o", out, "--format", "gguf", "--quant", "f32", "--json",
    ]);
}

#[test]
fn f32_export_of_each_family_matches_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["llama-tiny", "qwen2-tiny", "qwen3-tiny"] {
        let src = root().join("fixtures/tiny").join(name);
        let out = tmp.path().join(format!("{name}.gguf"));
        export_f32(&src, &out);
        let g = GgufFile::open(&out).unwrap();
        let arch = &name[..name.find('-').unwrap()];
        assert_eq!(g.architecture(), Some(arch));
        for key in [
            "context_length",
            "embedding_length",
            "block_count",
            "feed_forward_length",
            "attention.head_count",
            "attention.head_count_kv",
            "rope.freq_base",
            "attention.layer_norm_rms_epsilon",
        ] {
            assert!(
                g.get(&format!("{arch}.{key}")).is_some(),
                "{name}: {arch}.{key}"
            );
        }
        for key in [
            "tokenizer.ggml.model",
            "tokenizer.ggml.pre",
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.merges",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.chat_template",
        ] {
            assert!(g.get(key).is_some(), "{name}: {key}");
        }
        assert_eq!(
            g.tensor("output.weight").is_some(),
            name == "llama-tiny",
            "{name}: untied head only for llama-tiny"
        );
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("reference.json")).unwrap())
                .unwrap();
        let worst =
            common::max_logit_error(&crate::common::open_exact(&out).unwrap(), &r["logits"]);
        assert!(worst < 1e-4, "{name}: max logit error {worst}");
        // Tokenizer rebuilt from tokenizer.ggml.* gives the HF ids.
        let m = crate::common::open_exact(&out).unwrap();
        for case in r["tokenize"].as_array().unwrap() {
            let ids: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(
                m.tokenizer
                    .encode(case["text"].as_str().unwrap(), false)
                    .unwrap(),
                ids,
                "{name}"
            );
        }
    }
}

#[test]
fn pocket_q4_carries_into_q4_0_and_q4_1_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/tiny/qwen3-tiny");
    for (flags, gguf_quant, ty) in [
        (&["--sym", "--block", "32"][..], "q4_0", GgmlType::Q4_0),
        (&["--block", "64"][..], "q4_1", GgmlType::Q4_1),
    ] {
        let pk = tmp.path().join(format!("{gguf_quant}.pocket"));
        let mut args = vec![
            "quantize",
            src.to_str().unwrap(),
            "-o",
            pk.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(flags);
        pocket(&args);
        let out = tmp.path().join(format!("{gguf_quant}.gguf"));
        let report = pocket(&[
            "export",
            pk.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--format",
            "gguf",
            "--quant",
            gguf_quant,
            "--json",
        ]);
        let (mut carried, mut inexact) = (0, 0);
        for t in report["report"]["tensors"].as_array().unwrap() {
            carried += t["carried_blocks"].as_u64().unwrap();
            inexact += t["inexact_blocks"].as_u64().unwrap();
        }
        eprintln!("{gguf_quant}: {carried} blocks carried, {inexact} re-quantized");
        assert!(carried > 0);
        // Symmetric blocks always carry; asymmetric ones do because the quantizer picks zero
        // points exact in both conventions (search.rs, dual_exact).
        assert_eq!(inexact, 0, "{gguf_quant}: every block carries");
        // Every carried tensor dequantizes identically from both files (inexact blocks aside).
        let (g, p) = (
            ModelFile::open(&out).unwrap(),
            crate::common::open_exact(&pk).unwrap(),
        );
        let pf = &p.file;
        let (mut differing, mut blocks) = (0, 0);
        for layer in 0..3 {
            for (proj, rows, cols) in [
                ("self_attn.q_proj", 128, 64),
                ("mlp.down_proj", 64, 128),
                ("mlp.gate_proj", 128, 64),
            ] {
                let name = format!("model.layers.{layer}.{proj}.weight");
                let (a, b) = (
                    crate::common::matrix(&g, &name, rows, cols),
                    crate::common::matrix(pf, &name, rows, cols),
                );
                assert_eq!(a.type_name(), ty.name());
                let (mut x, mut y) = (vec![0.0; cols], vec![0.0; cols]);
                for r in 0..rows {
                    a.row(r, &mut x);
                    b.row(r, &mut y);
                    for s in 0..cols / 32 {
                        blocks += 1;
                        differing += usize::from(
                            x[s * 32..][..32]
                                .iter()
                                .zip(&y[s * 32..][..32])
                                .any(|(p, q)| p.to_bits() != q.to_bits()),
                        );
                    }
                }
            }
        }
        assert!(
            differing as u64 <= inexact,
            "{gguf_quant}: {differing} of {blocks} blocks differ, {inexact} reported"
        );
    }
}

/// Gemma 3 to GGUF: the norms stored as llama.cpp's converter stores them (1 + w), the window
/// and the SentencePiece-free byte-level vocabulary of the tiny fixture read back to the same
/// logits as the checkpoint. The fixture itself uses what llama.cpp's gemma3 fixes in its
/// source otherwise (query_pre_attn_scalar ≠ head_dim, a global layer that is not every sixth,
/// soft-capping), so it is refused with the reason; a copy with llama.cpp's settings exports.
/// (llama.cpp itself runs the real model's exports: scripts/check-gguf-llamacpp.sh.)
#[test]
fn gemma3_exports_what_llamacpp_runs_and_refuses_what_it_cannot() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/tiny/gemma3-tiny");
    let out = tmp.path().join("refused.gguf");
    let o = crate::common::pocket_command()
        .args(["export", src.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--format", "gguf", "--quant", "f32"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("llama.cpp's gemma3 cannot hold"),
        "{err}"
    );
    assert!(!out.exists());

    let copy = tmp.path().join("gemma3-std");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    let cfg_path = copy.join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["layer_types"] = serde_json::json!(vec!["sliding_attention"; 4]);
    cfg["query_pre_attn_scalar"] = serde_json::json!(32);
    cfg["final_logit_softcapping"] = Value::Null;
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let out = tmp.path().join("gemma3.gguf");
    export_f32(&copy, &out);
    let g = GgufFile::open(&out).unwrap();
    assert_eq!(g.architecture(), Some("gemma3"));
    assert!(g.get("gemma3.attention.sliding_window").is_some());
    assert!(g.get("gemma3.attention.key_length").is_some());
    // A norm weight w is stored as 1 + w.
    let hf = crate::common::open_exact(&copy).unwrap();
    let w = match &hf.file {
        ModelFile::Hf { ckpt: h, .. } => h
            .tensor("model.layers.0.post_attention_layernorm.weight")
            .unwrap()
            .to_f32_vec()
            .unwrap(),
        _ => unreachable!(),
    };
    let t = g.tensor("blk.0.post_attention_norm.weight").unwrap();
    let mut stored = vec![0.0f32; w.len()];
    pocket_formats::gguf::ggml::dequantize(t.ty, t.data.as_slice(), &mut stored);
    for (s, w) in stored.iter().zip(&w) {
        assert_eq!(*s, 1.0 + w);
    }
    // Both read back to the same logits at every position of the reference sequence.
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("reference.json")).unwrap())
            .unwrap();
    let gguf = crate::common::open_exact(&out).unwrap();
    let tokens = common::ids(&r["logits"]["ids"]);
    let (mut a, mut b) = (hf.model.new_state(64), gguf.model.new_state(64));
    let mut worst = 0.0f32;
    for &t in &tokens {
        let x = hf.model.step(&mut a, t, true).unwrap().unwrap().to_vec();
        let y = gguf.model.step(&mut b, t, true).unwrap().unwrap();
        worst = x
            .iter()
            .zip(y)
            .fold(worst, |m, (p, q)| m.max((p - q).abs()));
    }
    assert!(worst < 1e-5, "max logit difference {worst}");
    for case in r["tokenize"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            gguf.tokenizer.encode(text, false).unwrap(),
            common::ids(&case["ids"])
        );
    }
}

/// A 4- or 5-bit GGUF export from a checkpoint takes the calibrated search (Q4_0/Q4_1 through
/// a temporary `.pocket` whose blocks carry over whole), names the model after its input,
/// leaves no temporary behind, and writes IQ4_NL, Q5_0 and Q5_1 that decode close to the
/// source, the 5-bit types closer than the 4-bit ones.
#[test]
fn four_and_five_bit_gguf_exports_take_the_calibrated_search() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/tiny/qwen3-tiny");
    for quant in ["q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"] {
        let out = tmp.path().join(format!("{quant}.gguf"));
        let report = pocket(&[
            "export",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--format",
            "gguf",
            "--quant",
            quant,
            "--json",
        ]);
        let tensors = report["report"]["tensors"].as_array().unwrap();
        let carried: u64 = tensors
            .iter()
            .map(|t| t["carried_blocks"].as_u64().unwrap())
            .sum();
        let inexact: u64 = tensors
            .iter()
            .map(|t| t["inexact_blocks"].as_u64().unwrap())
            .sum();
        let up = tensors
            .iter()
            .find(|t| t["name"] == "blk.0.ffn_up.weight")
            .expect("the up projection is written");
        assert_eq!(
            up["ty"],
            quant.to_uppercase(),
            "{quant}: the matrices' type"
        );
        if quant != "q4_0" && quant != "q4_1" {
            assert_eq!(carried, 0);
        } else {
            assert!(
                carried > 0 && inexact == 0,
                "{quant}: {carried} carried, {inexact} not"
            );
        }
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(names.is_empty(), "temporaries left: {names:?}");
        let g = GgufFile::open(&out).unwrap();
        assert_eq!(
            g.get("general.name").and_then(|v| v.as_str()),
            Some("qwen3-tiny"),
            "{quant}: general.name"
        );
        // Every 4-bit matrix decodes within a few steps of the source weights.
        let (gm, sm) = (
            ModelFile::open(&out).unwrap(),
            ModelFile::open(&src).unwrap(),
        );
        let name = "model.layers.0.mlp.up_proj.weight";
        let (a, b) = (gm.read_f32(name).unwrap(), sm.read_f32(name).unwrap());
        let rms = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
        let err: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
        // A 4-bit step is about a fifteenth of a block's range, a 5-bit one a thirty-first.
        let bound = if quant.starts_with("q5") { 0.06 } else { 0.15 };
        assert!(
            rms(&err) < bound * rms(&b),
            "{quant}: {} vs {}",
            rms(&err),
            rms(&b)
        );
    }
}
