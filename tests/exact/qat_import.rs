//! QAT import: weights trained for 4 bits come out of `pocket quantize` exactly as they went in.
//! References: fixtures/qat, made by fixtures/make_qat_fixtures.py with the compressed-tensors
//! package (its own compressor and decompressor) and transformers.

use pocket::loader::{LoadedModel, ModelFile};
use pocket_formats::hf::SafetensorsFile;
use serde_json::Value;
use std::path::PathBuf;

use crate::common;
use common::{max_logit_error, quantize as import};

fn fixture(name: &str) -> PathBuf {
    crate::common::root().join("fixtures/qat").join(name)
}

fn reference(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("reference.json")).unwrap())
        .unwrap()
}

fn weights(m: &LoadedModel, name: &str, rows: usize, cols: usize) -> Vec<f32> {
    assert!(matches!(m.file, ModelFile::Pocket(_)), "expected a .pocket");
    let mat = crate::common::matrix(&m.file, name, rows, cols);
    let mut out = vec![0.0; rows * cols];
    for (r, row) in out.chunks_exact_mut(cols).enumerate() {
        mat.row(r, row);
    }
    out
}

#[test]
fn grid_aligned_bf16_imports_bit_exactly_and_reports_off_grid_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let r = reference("grid-bf16");
    let src = SafetensorsFile::open(&fixture("grid-bf16").join("model.safetensors")).unwrap();

    // Default recipe (q4 asymmetric block 64, QAT auto); the embedding stays bf16.
    let out = tmp.path().join("auto.pocket");
    let report = import(&fixture("grid-bf16"), &out, &["--embed", "bf16"]);
    let m = crate::common::open_exact(&out).unwrap();
    let off: &serde_json::Map<String, Value> = r["off_grid_blocks"].as_object().unwrap();
    for (name, blocks) in off {
        let t = &src.tensors[name];
        let (rows, cols) = (t.shape[0], t.shape[1]);
        let want = t.to_f32_vec().unwrap();
        let got = weights(&m, name, rows, cols);
        let mut differing: Vec<(usize, usize)> = Vec::new();
        for i in 0..rows * cols {
            if got[i].to_bits() != want[i].to_bits()
                && !differing.contains(&(i / cols, (i % cols) / 64))
            {
                differing.push((i / cols, (i % cols) / 64));
            }
        }
        let expected: Vec<(usize, usize)> = blocks
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b[0].as_u64().unwrap() as usize,
                    b[1].as_u64().unwrap() as usize,
                )
            })
            .collect();
        assert_eq!(
            differing, expected,
            "{name}: only the off-grid blocks may differ"
        );
        let rep = report["report"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name.as_str())
            .unwrap();
        let reported: Vec<(usize, usize)> =
            serde_json::from_value(rep["off_grid"].clone()).unwrap_or_default();
        assert_eq!(
            reported, expected,
            "{name}: the report names the off-grid blocks"
        );
    }

    // With the one imperfect tensor kept at bf16, the whole model is exact: logits equal
    // transformers' on the checkpoint.
    let out = tmp.path().join("exact.pocket");
    import(
        &fixture("grid-bf16"),
        &out,
        &[
            "--embed",
            "bf16",
            "--type",
            "model.layers.1.mlp.down_proj.weight=bf16",
            "--qat",
            "strict",
        ],
    );
    let m = crate::common::open_exact(&out).unwrap();
    let worst = max_logit_error(&m, &r["logits"]);
    assert!(worst < 1e-4, "max logit error {worst}");
}

#[test]
fn compressed_tensors_import_keeps_every_integer() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["ct-sym-g64", "ct-asym-g64", "ct-sym-g128", "ct-asym-g128"] {
        let r = reference(name);
        let dtype = r["scale_dtype"].as_str().unwrap();
        let embed = if dtype == "bfloat16" { "bf16" } else { "f16" };
        let out = tmp.path().join(format!("{name}.pocket"));
        let report = import(&fixture(name), &out, &["--embed", embed]);
        let m = crate::common::open_exact(&out).unwrap();
        let refw =
            SafetensorsFile::open(&fixture(name).join("reference_weights.safetensors")).unwrap();
        let mut inexact_blocks = 0;
        for (module, info) in r["quantized_layers"].as_object().unwrap() {
            let (rows, cols) = (
                info["shape"][0].as_u64().unwrap() as usize,
                info["shape"][1].as_u64().unwrap() as usize,
            );
            let group = info["group_size"].as_u64().unwrap() as usize;
            let wname = format!("{module}.weight");
            let got = weights(&m, &wname, rows, cols);
            let want = refw.tensors[&wname].to_f32_vec().unwrap();
            // The package's decompression rounds (q − zp)·scale to the scale dtype; ours keeps
            // the exact product. Rounded the same way they must agree bit for bit.
            let round = |v: f32| {
                if dtype == "bfloat16" {
                    half::bf16::from_f32(v).to_f32()
                } else {
                    half::f16::from_f32(v).to_f32()
                }
            };
            let mut bad_blocks = std::collections::BTreeSet::new();
            for i in 0..rows * cols {
                if round(got[i]).to_bits() != want[i].to_bits() {
                    bad_blocks.insert((i / cols, (i % cols) / group));
                }
            }
            let rep = report["report"]["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == wname.as_str())
                .unwrap();
            let (on, all): (usize, usize) =
                serde_json::from_value(rep["qat_blocks"].clone()).unwrap();
            assert_eq!(all, rows * cols / group, "{name} {wname}: block count");
            assert!(
                bad_blocks.len() <= all - on,
                "{name} {wname}: {} blocks differ but only {} were reported off-grid",
                bad_blocks.len(),
                all - on
            );
            inexact_blocks += all - on;
        }
        let worst = max_logit_error(&m, &r["logits_exact_product"]);
        eprintln!("{name}: {inexact_blocks} blocks not exactly representable; max logit error vs exact-product reference {worst:.2e}");
        if inexact_blocks == 0 {
            assert!(worst < 1e-4, "{name}: max logit error {worst}");
        } else {
            assert!(worst < 2e-2, "{name}: max logit error {worst}");
        }
        // Only the asymmetric f16-scale fixture has blocks f16 parameters cannot hold.
        assert_eq!(inexact_blocks > 0, name == "ct-asym-g128", "{name}");
    }
}

#[test]
fn compressed_tensors_directory_is_not_run_directly() {
    let o = crate::common::pocket_command()
        .args(["run", fixture("ct-sym-g64").to_str().unwrap(), "-p", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("pocket quantize"));
}
