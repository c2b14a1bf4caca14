//! `pocket export --format mnn`: the package's weights are the `.pocket` bytes (codes, f16
//! pairs or scales, biases, norm weights), and the FlatBuffer graph points at them. That MNN's
//! runtime loads the package and computes the same logits is scripts/check-mnn.sh (run in CI).

use pocket_formats::pocket::reader::PocketFile;
use pocket_formats::quant::{q4, QuantType};
use serde_json::Value;
use std::path::Path;

use crate::common;
use common::{pocket, tiny};

fn export(src: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec!["export", src.to_str().unwrap(), "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = pocket(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A minimal FlatBuffer reader (safe, bounds-checked by slicing) for the test's own checks.
struct Fb<'a>(&'a [u8]);

impl Fb<'_> {
    fn u32(&self, at: usize) -> usize {
        u32::from_le_bytes(self.0[at..at + 4].try_into().unwrap()) as usize
    }
    /// Position of field `id` of the table at `t`.
    fn field(&self, t: usize, id: usize) -> Option<usize> {
        let vt =
            (t as i64 - i32::from_le_bytes(self.0[t..t + 4].try_into().unwrap()) as i64) as usize;
        let len = u16::from_le_bytes([self.0[vt], self.0[vt + 1]]) as usize;
        if 4 + 2 * id >= len {
            return None;
        }
        let o = u16::from_le_bytes([self.0[vt + 4 + 2 * id], self.0[vt + 5 + 2 * id]]) as usize;
        (o != 0).then_some(t + o)
    }
    fn deref(&self, at: usize) -> usize {
        at + self.u32(at)
    }
    /// The elements' positions of the vector stored at field position `at`.
    fn vector(&self, at: usize, elem: usize) -> Vec<usize> {
        let v = self.deref(at);
        (0..self.u32(v)).map(|i| v + 4 + i * elem).collect()
    }
    fn i32_at(&self, at: usize) -> i32 {
        i32::from_le_bytes(self.0[at..at + 4].try_into().unwrap())
    }
}

/// Every Convolution's `external` array in `llm.mnn`, and the number of tensor names.
fn conv_externals(net: &[u8]) -> (Vec<Vec<i64>>, usize) {
    let fb = Fb(net);
    let root = fb.deref(0);
    let names = fb.vector(fb.field(root, 7).unwrap(), 4).len();
    let mut out = Vec::new();
    for op in fb.vector(fb.field(root, 3).unwrap(), 4) {
        let op = fb.deref(op);
        for idx in fb.field(op, 0).map(|f| fb.vector(f, 4)).unwrap_or_default() {
            assert!(
                (fb.i32_at(idx) as usize) < names,
                "input index out of range"
            );
        }
        if fb.i32_at(fb.field(op, 5).unwrap()) != 12 {
            continue;
        }
        assert_eq!(
            fb.0[fb.field(op, 1).unwrap()],
            9,
            "Convolution2D parameters"
        );
        let conv = fb.deref(fb.field(op, 2).unwrap());
        let ext = fb
            .vector(fb.field(conv, 6).unwrap(), 8)
            .into_iter()
            .map(|p| i64::from_le_bytes(net[p..p + 8].try_into().unwrap()))
            .collect();
        out.push(ext);
    }
    (out, names)
}

#[test]
fn weights_are_the_pocket_bytes_and_the_graph_points_at_them() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["qwen2-tiny", "qwen3-tiny", "llama-tiny"] {
        let q4 = tmp.path().join(format!("{name}.pocket"));
        export(&tiny(name), &q4, &[]);
        let dir = tmp.path().join(name);
        let o = pocket(&[
            "export",
            q4.to_str().unwrap(),
            "--format",
            "mnn",
            "-o",
            dir.to_str().unwrap(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        let weight = std::fs::read(dir.join("llm.mnn.weight")).unwrap();
        let cfg: Value =
            serde_json::from_slice(&std::fs::read(dir.join("llm_config.json")).unwrap()).unwrap();
        let untied = cfg["tie_embeddings"]["weight_offset"] == 0;
        assert_eq!(untied, name == "llama-tiny", "{name}");
        // An untied embedding table is a file of its own.
        let embeddings = untied.then(|| std::fs::read(dir.join("embeddings_int4.bin")).unwrap());
        let file = PocketFile::open(&q4).unwrap();
        let mut linear = Vec::new();
        for t in report["report"]["tensors"].as_array().unwrap() {
            let tname = t["name"].as_str().unwrap();
            let ext: Vec<usize> = t["external"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            let pt = file.tensor(tname).unwrap();
            let bytes = &pt.row_major()[..];
            let at = |i: usize| ext[0] + ext[1..i].iter().sum::<usize>();
            let own = tname == "model.embed_tokens.weight" && untied;
            let data = if own {
                embeddings.as_deref().unwrap()
            } else {
                &weight[..]
            };
            let section = |i: usize| &data[at(i)..at(i) + ext[i]];
            match pt.entry.dtype {
                QuantType::Q4 { sym, .. } => {
                    let (rows, cols) = (pt.entry.shape[0], pt.entry.shape[1]);
                    let (codes, params) = q4::planes(bytes, rows, cols);
                    let head = section(1);
                    let hl = head.len() - codes.len();
                    // (assert! rather than assert_eq!: a failure would print megabytes)
                    assert!(&head[hl..] == codes, "{name} {tname}: codes");
                    if own {
                        assert_eq!(hl, 0, "no header in the embeddings file");
                        assert!(section(2) == params, "{name}: embedding scales");
                        continue;
                    }
                    assert_eq!(head[0], 2);
                    assert_eq!(
                        &head[hl - 17..hl],
                        &[16, 248, 249, 250, 251, 252, 253, 254, 255, 0, 1, 2, 3, 4, 5, 6, 7]
                    );
                    assert_eq!(
                        section(2),
                        params,
                        "{name} {tname}: (zero, scale) pairs / scales (sym {sym})"
                    );
                    if ext[3] > 0 {
                        let bias = file.tensor(&tname.replace(".weight", ".bias")).unwrap();
                        assert_eq!(section(3), bias.data.as_slice(), "{name} {tname}: bias");
                    }
                    linear.push(
                        t["external"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_i64().unwrap())
                            .collect::<Vec<_>>(),
                    );
                }
                QuantType::F32 => {
                    assert_eq!(section(1), bytes, "{name} {tname}: norm weight");
                    assert!(section(2).iter().all(|&b| b == 0), "beta is zero");
                }
                other => panic!("{tname}: unexpected {other}"),
            }
        }
        // Every linear layer of the checkpoint, the head included, went in.
        let expected = file.tensors().filter(|t| t.dtype.is_quantized()).count() - untied as usize;
        assert_eq!(linear.len(), expected, "{name}");
        assert!(name != "qwen2-tiny" || report["report"]["tensors"].to_string().contains("q_proj"));
        let (mut graph, _) = conv_externals(&std::fs::read(dir.join("llm.mnn")).unwrap());
        graph.sort();
        linear.sort();
        assert_eq!(
            graph, linear,
            "{name}: the graph's Convolutions address the same bytes"
        );
        let tie = &cfg["tie_embeddings"];
        let embed = report["report"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "model.embed_tokens.weight")
            .unwrap();
        let e0 = embed["external"][0].as_i64().unwrap();
        assert_eq!(
            tie["alpha_offset"].as_i64().unwrap(),
            e0 + embed["external"][1].as_i64().unwrap()
        );
        // Tied: the rows start after the head's 22-byte header in llm.mnn.weight.
        assert!(untied || tie["weight_offset"].as_i64().unwrap() == e0 + 22);
    }
}

#[test]
fn only_q4_weights_are_exported_and_failures_leave_no_package() {
    let tmp = tempfile::tempdir().unwrap();
    let q8 = tmp.path().join("q8.pocket");
    export(&tiny("qwen3-tiny"), &q8, &["--quant", "q8"]);
    let dir = tmp.path().join("out");
    let o = pocket(&[
        "export",
        q8.to_str().unwrap(),
        "--format",
        "mnn",
        "-o",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("q8.pocket") && err.contains("not Q4"), "{err}");
    assert!(!err.contains("panicked"));
    assert!(!dir.exists(), "nothing written, not even the directory");

    // A checkpoint directory is exported with the Q4 recipe on the way (no temporary left).
    let o = pocket(&[
        "export",
        tiny("qwen3-tiny").to_str().unwrap(),
        "--format",
        "mnn",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "config.json",
            "llm.mnn",
            "llm.mnn.weight",
            "llm_config.json",
            "tokenizer.mtok"
        ]
    );
}
