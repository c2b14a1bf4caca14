//! LoRA adapters against transformers + peft (`fixtures/make_lora_fixtures.py`): on every tiny
//! fixture, the logits at every position of a text with each PEFT adapter (every linear layer;
//! the embedding and the output head; rsLoRA with rank and alpha patterns; a new output head
//! from `modules_to_save`) and with two adapters at once at their scales, on the f32 path.

use crate::common::{open_exact, root};
use pocket::lora::AdapterSet;
use pocket::model::Logits;
use pocket_formats::hf::SafetensorsFile;
use std::sync::Arc;

const TOLERANCE: f32 = 1e-5;

fn reference() -> SafetensorsFile {
    SafetensorsFile::open(&root().join("fixtures/lora/reference.safetensors")).unwrap()
}

#[test]
fn adapters_equal_peft_at_every_position() {
    let r = reference();
    let ids_of = |model: &str| -> Vec<u32> {
        serde_json::from_str(&r.metadata[&format!("{model}.ids")]).unwrap()
    };
    let pair: Vec<(String, f32)> = serde_json::from_str(&r.metadata["pair"]).unwrap();
    let mut checked = 0;
    for model in ["qwen2-tiny", "llama-tiny", "qwen3-tiny", "gemma3-tiny"] {
        let m = open_exact(&root().join("fixtures/tiny").join(model)).unwrap();
        let ids = ids_of(model);
        let open = |name: &str| {
            Arc::new(
                m.model
                    .open_adapter(&root().join("fixtures/lora").join(model).join(name), name)
                    .unwrap(),
            )
        };
        let mut cases: Vec<(String, AdapterSet)> = ["all", "embed_head", "patterns", "saved"]
            .iter()
            .map(|a| {
                (
                    a.to_string(),
                    AdapterSet {
                        adapters: vec![(open(a), 1.0)],
                    },
                )
            })
            .collect();
        cases.push((
            "pair".into(),
            AdapterSet {
                adapters: pair.iter().map(|(a, s)| (open(a), *s)).collect(),
            },
        ));
        cases.push(("base".into(), AdapterSet::default()));
        for (case, set) in cases {
            let want = r.tensors[&format!("{model}.{case}")].to_f32_vec().unwrap();
            let mut st = m.model.new_state(256);
            st.lora = Some(Arc::new(set));
            let got = m.model.forward_batch(&mut st, &ids, Logits::All).unwrap();
            assert_eq!(got.len(), want.len(), "{model} {case}");
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            eprintln!("{model} {case}: max |logit - peft| = {worst:.2e}");
            let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            eprintln!("  (largest |logit| {scale:.2})");
            assert!(
                worst <= TOLERANCE * scale.max(1.0),
                "{model} {case}: max abs logit error {worst:.2e}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * 6);
}

/// llama.cpp's GGUF LoRA files (`convert_lora_to_gguf.py` of the PEFT adapters above) on the
/// llama fixture's GGUF (`fixtures/gguf/llama-tiny-f32.gguf`, converted as llama.cpp does):
/// the same logits as transformers + peft, so the q/k rows llama.cpp permutes, the embedding's
/// transposed `A` and `alpha / r` are read right.
#[test]
fn gguf_adapters_on_a_gguf_base_equal_peft() {
    let r = reference();
    let ids: Vec<u32> = serde_json::from_str(&r.metadata["llama-tiny.ids"]).unwrap();
    let m = open_exact(&root().join("fixtures/gguf/llama-tiny-f32.gguf")).unwrap();
    for case in ["all", "embed_head"] {
        let path = root().join(format!("fixtures/lora/llama-tiny.{case}.gguf"));
        let a = Arc::new(m.model.open_adapter(&path, case).unwrap());
        let mut st = m.model.new_state(256);
        st.lora = Some(Arc::new(AdapterSet {
            adapters: vec![(a, 1.0)],
        }));
        let got = m.model.forward_batch(&mut st, &ids, Logits::All).unwrap();
        let want = r.tensors[&format!("llama-tiny.{case}")]
            .to_f32_vec()
            .unwrap();
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        eprintln!("GGUF llama-tiny {case}: max |logit - peft| = {worst:.2e} (largest {scale:.2})");
        assert!(worst <= TOLERANCE * scale.max(1.0), "{case}: {worst:.2e}");
    }
}

/// Mean KL(p ‖ q) over positions of two `n × vocab` logit sets.
fn mean_kl(p: &[f32], q: &[f32], vocab: usize) -> f64 {
    let lsm = |row: &[f32]| -> Vec<f64> {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let z = row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln() + m;
        row.iter().map(|&x| x as f64 - z).collect()
    };
    let n = p.len() / vocab;
    (0..n)
        .map(|i| {
            let (a, b) = (
                lsm(&p[i * vocab..(i + 1) * vocab]),
                lsm(&q[i * vocab..(i + 1) * vocab]),
            );
            a.iter()
                .zip(&b)
                .map(|(x, y)| x.exp() * (x - y))
                .sum::<f64>()
        })
        .sum::<f64>()
        / n as f64
}

/// `pocket export BASE --lora ADAPTER`: merged at f32 (W + s·B·A stored), the export's logits
/// equal the unmerged adapter's run on the base within f32 rounding; merged into Q8 and Q4 (the
/// calibrated search on the merged weights, calibration run with the adapter), its KL from the
/// unmerged run is the quantizer's own: about the base's KL from its own export at that type.
#[test]
fn a_merged_export_equals_the_unmerged_run() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference();
    let logits = |path: &std::path::Path, ids: &[u32], lora: Option<(&std::path::Path, f32)>| {
        let m = open_exact(path).unwrap();
        let mut st = m.model.new_state(256);
        if let Some((a, s)) = lora {
            let a = Arc::new(m.model.open_adapter(a, "a").unwrap());
            st.lora = Some(Arc::new(AdapterSet {
                adapters: vec![(a, s)],
            }));
        }
        (
            m.model.forward_batch(&mut st, ids, Logits::All).unwrap(),
            m.model.spec.vocab_size,
        )
    };
    for model in ["llama-tiny", "qwen2-tiny"] {
        let ids: Vec<u32> = serde_json::from_str(&r.metadata[&format!("{model}.ids")]).unwrap();
        let base = root().join("fixtures/tiny").join(model);
        let adapter = root().join("fixtures/lora").join(model).join("all");
        let spec = format!("{}:0.8", adapter.display());
        let (unmerged, vocab) = logits(&base, &ids, Some((&adapter, 0.8)));
        let (plain, _) = logits(&base, &ids, None);
        for quant in ["f32", "q8", "q4"] {
            let export = |lora: bool| {
                let out = tmp.path().join(format!("{model}-{quant}-{lora}.pocket"));
                let mut args = vec![
                    "export",
                    base.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                    "--quant",
                    quant,
                ];
                if lora {
                    args.extend(["--lora", spec.as_str()]);
                }
                crate::common::pocket_ok(&args);
                out
            };
            let (merged, _) = logits(&export(true), &ids, None);
            let kl = mean_kl(&unmerged, &merged, vocab);
            if quant == "f32" {
                let worst = merged
                    .iter()
                    .zip(&unmerged)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                eprintln!(
                    "{model} merged at f32: max |logit - unmerged| = {worst:.2e}, KL {kl:.2e}"
                );
                assert!(worst <= 2e-5, "{model}: {worst:.2e}");
                continue;
            }
            let (own, _) = logits(&export(false), &ids, None);
            let kl_base = mean_kl(&plain, &own, vocab);
            eprintln!("{model} {quant}: KL(unmerged ‖ merged export) {kl:.2e}; the base's own export {kl_base:.2e}");
            assert!(
                kl <= 2.0 * kl_base + 1e-4,
                "{model} {quant}: {kl:.2e} vs {kl_base:.2e}"
            );
        }
    }
}

/// The merge goes into every export format: a GGUF at f32 (llama's q/k rows permuted as
/// llama.cpp stores them) runs as the unmerged adapter does, and an MNN package is written
/// from the merged Q4 export.
#[test]
fn merges_reach_gguf_and_mnn_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference();
    let ids: Vec<u32> = serde_json::from_str(&r.metadata["llama-tiny.ids"]).unwrap();
    let base = root().join("fixtures/tiny/llama-tiny");
    let adapter = root().join("fixtures/lora/llama-tiny/all");
    let m = open_exact(&base).unwrap();
    let a = Arc::new(m.model.open_adapter(&adapter, "all").unwrap());
    let mut st = m.model.new_state(256);
    st.lora = Some(Arc::new(AdapterSet {
        adapters: vec![(a, 1.0)],
    }));
    let unmerged = m.model.forward_batch(&mut st, &ids, Logits::All).unwrap();
    let gguf = tmp.path().join("merged.gguf");
    let (b, ad, g) = (
        base.to_str().unwrap(),
        adapter.to_str().unwrap(),
        gguf.to_str().unwrap(),
    );
    crate::common::pocket_ok(&[
        "export", b, "--lora", ad, "--format", "gguf", "--quant", "f32", "-o", g,
    ]);
    let mg = open_exact(&gguf).unwrap();
    let mut st = mg.model.new_state(256);
    let merged = mg.model.forward_batch(&mut st, &ids, Logits::All).unwrap();
    let worst = merged
        .iter()
        .zip(&unmerged)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= 2e-5, "GGUF merged: {worst:.2e}");
    let mnn = tmp.path().join("merged-mnn");
    crate::common::pocket_ok(&[
        "export",
        b,
        "--lora",
        ad,
        "--format",
        "mnn",
        "-o",
        mnn.to_str().unwrap(),
    ]);
    assert!(mnn.join("llm.mnn").is_file() || std::fs::read_dir(&mnn).unwrap().count() > 2);
}

/// A decision model built as the Dec family is (a base plus a LoRA adapter): `pocket decide
/// --lora` answers as the f32 export with the adapter merged (itself equal to the unmerged run
/// within 2e-5 above, and the adapter to peft), and not as the base alone.
#[test]
fn decisions_run_with_an_adapter_as_on_the_merged_export() {
    let tmp = tempfile::tempdir().unwrap();
    let base = root().join("fixtures/tiny/llama-tiny");
    let adapter = root().join("fixtures/lora/llama-tiny/all");
    let merged = tmp.path().join("merged.pocket");
    crate::common::pocket_ok(&[
        "export",
        base.to_str().unwrap(),
        "--lora",
        adapter.to_str().unwrap(),
        "--quant",
        "f32",
        "-o",
        merged.to_str().unwrap(),
    ]);
    let decide = |model: &std::path::Path, lora: bool| -> Vec<f64> {
        let mut args = vec![
            "decide".to_string(),
            model.display().to_string(),
            "--state".into(),
            "My parcel never arrived and I want my money back.".into(),
            "--choice".into(),
            "What does the customer want?".into(),
            "refund=money back".into(),
            "shipping=where the parcel is".into(),
            "other=something else".into(),
            "--noul".into(),
            "Is the customer angry?".into(),
            "--json".into(),
        ];
        if lora {
            args.extend(["--lora".to_string(), adapter.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out: serde_json::Value =
            serde_json::from_slice(&crate::common::pocket_ok(&args).stdout).unwrap();
        let a = &out["answers"];
        let mut p: Vec<f64> = ["refund", "shipping", "other"]
            .iter()
            .map(|k| a["choice"]["probabilities"][k].as_f64().unwrap())
            .collect();
        p.push(a["noul"]["noul"].as_f64().unwrap());
        p
    };
    let (unmerged, on_merged, plain) = (
        decide(&base, true),
        decide(&merged, false),
        decide(&base, false),
    );
    for (u, m) in unmerged.iter().zip(&on_merged) {
        assert!(
            (u - m).abs() <= 1e-5,
            "unmerged {unmerged:?} vs merged {on_merged:?}"
        );
    }
    let moved = unmerged
        .iter()
        .zip(&plain)
        .map(|(u, p)| (u - p).abs())
        .fold(0.0, f64::max);
    assert!(
        moved > 1e-3,
        "the adapter changes the answers: {unmerged:?} vs {plain:?}"
    );
}
