//! Every class of bad input we know of, across formats, through the `pocket` binary: each must
//! give exit code 1 (2 for bad usage), one line on stderr that starts with `error:`, names the
//! file and says what is wrong, no panic and no output file. The table in docs/robustness.md is
//! this test's output (`target/tmp/robustness-table.md`).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common;
use common::{root, tiny};

struct Case {
    format: &'static str,
    what: &'static str,
    /// The command's arguments after `pocket`; `{}` is replaced by the input's path.
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    code: i32,
    /// Fragments the message must contain.
    needles: Vec<&'static str>,
}

fn case(format: &'static str, what: &'static str, input: &Path, needles: &[&'static str]) -> Case {
    Case {
        format,
        what,
        args: vec!["inspect".into(), input.display().to_string()],
        stdin: None,
        code: 1,
        needles: needles.to_vec(),
    }
}

/// A case whose command is `pocket run INPUT -p hi` (the file is only read when a chat starts).
fn run_case(
    format: &'static str,
    what: &'static str,
    input: &Path,
    needles: &[&'static str],
) -> Case {
    let mut c = case(format, what, input, needles);
    c.args = vec![
        "run".into(),
        input.display().to_string(),
        "-p".into(),
        "hi".into(),
    ];
    c
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

/// A copy of the qwen3 fixture under `dir/name`, with `f` applied.
fn checkpoint(dir: &Path, name: &str, f: impl FnOnce(&Path)) -> PathBuf {
    let d = dir.join(name);
    copy_dir(&tiny("qwen3-tiny"), &d);
    f(&d);
    d
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Safetensors parts: (header JSON, data section).
fn st_split(path: &Path) -> (Value, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    (
        serde_json::from_slice(&b[8..8 + n]).unwrap(),
        b[8 + n..].to_vec(),
    )
}

fn st_join(path: &Path, header: &[u8], data: &[u8]) {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(data);
    std::fs::write(path, out).unwrap();
}

/// Gives tensor `name` a new `shape` and the first `bytes` of its data, moving the tensors
/// stored after it so the data section stays contiguous.
fn resize_tensor(h: &mut Value, data: &mut Vec<u8>, name: &str, shape: &[usize], bytes: usize) {
    let (s, e) = (
        h[name]["data_offsets"][0].as_u64().unwrap() as usize,
        h[name]["data_offsets"][1].as_u64().unwrap() as usize,
    );
    let cut = e - s - bytes;
    data.drain(s + bytes..e);
    h[name]["shape"] = serde_json::json!(shape);
    h[name]["data_offsets"] = serde_json::json!([s, s + bytes]);
    for (k, t) in h.as_object_mut().unwrap().iter_mut() {
        if k == "__metadata__" || k == name {
            continue;
        }
        let o = t["data_offsets"][0].as_u64().unwrap() as usize;
        if o >= e {
            let end = t["data_offsets"][1].as_u64().unwrap() as usize;
            t["data_offsets"] = serde_json::json!([o - cut, end - cut]);
        }
    }
}

fn edit_safetensors(dir: &Path, f: impl FnOnce(&mut Value, &mut Vec<u8>)) {
    let p = dir.join("model.safetensors");
    let (mut h, mut data) = st_split(&p);
    f(&mut h, &mut data);
    st_join(&p, &serde_json::to_vec(&h).unwrap(), &data);
}

/// Byte positions inside a GGUF: the end of the fixed header, of the metadata, of the tensor
/// infos, and each tensor info's (name position, offset-field position).
struct GgufMap {
    meta_end: usize,
    infos_end: usize,
    infos: Vec<(String, usize)>,
    arch_value: usize,
}

fn gguf_map(b: &[u8]) -> GgufMap {
    let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
    let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
    fn skip(b: &[u8], p: usize, ty: u32) -> usize {
        let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
        match ty {
            0 | 1 | 7 => p + 1,
            2 | 3 => p + 2,
            4..=6 => p + 4,
            10..=12 => p + 8,
            8 => p + 8 + u64_at(p),
            9 => {
                let inner = u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
                let n = u64_at(p + 4);
                (0..n).fold(p + 12, |q, _| skip(b, q, inner))
            }
            t => panic!("type {t}"),
        }
    }
    let n_tensors = u64_at(8);
    let n_kv = u64_at(16);
    let mut p = 24;
    let mut arch_value = 0;
    for _ in 0..n_kv {
        let klen = u64_at(p);
        let key = String::from_utf8(b[p + 8..p + 8 + klen].to_vec()).unwrap();
        p += 8 + klen;
        let ty = u32_at(p);
        p += 4;
        if key == "general.architecture" {
            arch_value = p + 8;
        }
        p = skip(b, p, ty);
    }
    let meta_end = p;
    let mut infos = Vec::new();
    for _ in 0..n_tensors {
        let nlen = u64_at(p);
        let name = String::from_utf8(b[p + 8..p + 8 + nlen].to_vec()).unwrap();
        p += 8 + nlen;
        let nd = u32_at(p) as usize;
        p += 4 + 8 * nd + 4;
        infos.push((name, p));
        p += 8;
    }
    GgufMap {
        meta_end,
        infos_end: p,
        infos,
        arch_value,
    }
}

/// A `.pocket` file rebuilt with its JSON header edited (checksum and data offset redone).
fn edit_pocket(src: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let hlen = u64::from_le_bytes(src[16..24].try_into().unwrap()) as usize;
    let data_at = u32::from_le_bytes(src[12..16].try_into().unwrap()) as usize;
    let mut h: Value = serde_json::from_slice(&src[32..32 + hlen]).unwrap();
    f(&mut h);
    let json = serde_json::to_vec(&h).unwrap();
    let d = (32 + json.len()).div_ceil(64) * 64;
    let mut out = src[..32].to_vec();
    out[12..16].copy_from_slice(&(d as u32).to_le_bytes());
    out[16..24].copy_from_slice(&(json.len() as u64).to_le_bytes());
    out[24..32].copy_from_slice(&xxhash_rust::xxh3::xxh3_64(&json).to_le_bytes());
    out.extend_from_slice(&json);
    out.resize(d, 0);
    out.extend_from_slice(&src[data_at..]);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn cases(dir: &Path) -> Vec<Case> {
    let mut v = Vec::new();
    let s = "safetensors";
    // --- HF checkpoint: safetensors ---
    let d = checkpoint(dir, "trunc-data", |d| {
        let p = d.join("model.safetensors");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() - 100]).unwrap();
    });
    v.push(case(
        s,
        "truncated in the data section",
        &d,
        &["model.safetensors", "past the end"],
    ));
    let d = checkpoint(dir, "trunc-header", |d| {
        let p = d.join("model.safetensors");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..200]).unwrap();
    });
    v.push(case(
        s,
        "truncated inside the JSON header",
        &d,
        &["model.safetensors", "header length"],
    ));
    let d = checkpoint(dir, "trunc-len", |d| {
        std::fs::write(d.join("model.safetensors"), [1u8, 2, 3, 4, 5]).unwrap();
    });
    v.push(case(
        s,
        "truncated inside the 8-byte length",
        &d,
        &["model.safetensors", "too short"],
    ));
    let d = checkpoint(dir, "huge-header-len", |d| {
        let p = d.join("model.safetensors");
        let mut b = std::fs::read(&p).unwrap();
        b[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        std::fs::write(&p, b).unwrap();
    });
    v.push(case(
        s,
        "header length 2^60",
        &d,
        &["model.safetensors", "header length"],
    ));
    let d = checkpoint(dir, "header-not-json", |d| {
        let p = d.join("model.safetensors");
        let (_, data) = st_split(&p);
        st_join(&p, b"{\"a\": [1, 2", &data);
    });
    v.push(case(
        s,
        "header is not JSON",
        &d,
        &["model.safetensors", "JSON"],
    ));
    let d = checkpoint(dir, "offsets-past-eof", |d| {
        edit_safetensors(d, |h, _| {
            h["model.norm.weight"]["data_offsets"][1] = (1u64 << 40).into();
        })
    });
    v.push(case(
        s,
        "data offsets past the end of the file",
        &d,
        &["model.norm.weight", "past the end"],
    ));
    let d = checkpoint(dir, "overlap", |d| {
        edit_safetensors(d, |h, _| {
            let a = h["model.norm.weight"]["data_offsets"].clone();
            h["model.layers.0.input_layernorm.weight"]["data_offsets"] = a;
        })
    });
    v.push(case(
        s,
        "two tensors share bytes (overlap)",
        &d,
        &["model.safetensors"],
    ));
    let d = checkpoint(dir, "shape-overflow", |d| {
        edit_safetensors(d, |h, _| {
            h["model.norm.weight"]["shape"] =
                serde_json::json!([1u64 << 32, 1u64 << 32, 1u64 << 32]);
        })
    });
    v.push(case(
        s,
        "shape product overflows u64",
        &d,
        &["model.norm.weight", "overflows"],
    ));
    let d = checkpoint(dir, "negative-dim", |d| {
        edit_safetensors(d, |h, _| {
            h["model.norm.weight"]["shape"] = serde_json::json!([-64]);
        })
    });
    v.push(case(
        s,
        "negative dimension",
        &d,
        &["model.norm.weight", "not a list of integers"],
    ));
    let d = checkpoint(dir, "size-mismatch", |d| {
        edit_safetensors(d, |h, _| {
            h["model.norm.weight"]["shape"] = serde_json::json!([63]);
        })
    });
    v.push(case(
        s,
        "odd size: shape and byte range disagree",
        &d,
        &["model.norm.weight", "needs"],
    ));
    let d = checkpoint(dir, "unknown-dtype", |d| {
        edit_safetensors(d, |h, _| {
            h["model.norm.weight"]["dtype"] = "F9".into();
        })
    });
    v.push(case(s, "unknown dtype", &d, &["model.safetensors"]));
    let d = checkpoint(dir, "duplicate-name", |d| {
        let p = d.join("model.safetensors");
        let b = std::fs::read(&p).unwrap();
        let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        let h = String::from_utf8(b[8..8 + n].to_vec()).unwrap();
        // Same length, so the byte layout stays put: a key of the JSON object appears twice.
        let h = h.replacen(
            "model.layers.1.mlp.up_proj.weight",
            "model.layers.0.mlp.up_proj.weight",
            1,
        );
        let mut out = b[..8].to_vec();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&b[8 + n..]);
        std::fs::write(&p, out).unwrap();
    });
    v.push(case(
        s,
        "duplicate tensor name",
        &d,
        &[
            "model.safetensors",
            "model.layers.0.mlp.up_proj.weight",
            "twice",
        ],
    ));
    // --- HF checkpoint: config and files ---
    let c = "config.json";
    let d = checkpoint(dir, "no-hidden", |d| {
        edit_json(&d.join("config.json"), |v| {
            v.as_object_mut().unwrap().remove("hidden_size");
        })
    });
    v.push(case(
        c,
        "missing field",
        &d,
        &["config.json", "hidden_size"],
    ));
    let d = checkpoint(dir, "unknown-type", |d| {
        edit_json(&d.join("config.json"), |v| v["model_type"] = "mamba".into())
    });
    v.push(case(c, "unknown model_type", &d, &["config.json", "mamba"]));
    let d = checkpoint(dir, "negative-layers", |d| {
        edit_json(&d.join("config.json"), |v| {
            v["num_hidden_layers"] = (-1).into()
        })
    });
    v.push(case(
        c,
        "negative layer count",
        &d,
        &["config.json", "num_hidden_layers"],
    ));
    let d = checkpoint(dir, "huge-layers", |d| {
        edit_json(&d.join("config.json"), |v| {
            v["num_hidden_layers"] = (1u64 << 60).into()
        })
    });
    v.push(case(c, "layer count 2^60", &d, &["config.json"]));
    let d = checkpoint(dir, "shape-vs-config", |d| {
        edit_json(&d.join("config.json"), |v| {
            v["intermediate_size"] = 256.into()
        })
    });
    v.push(case(
        c,
        "tensor shapes disagree with config",
        &d,
        &["mlp", "shape"],
    ));
    let d = checkpoint(dir, "bad-utf8-config", |d| {
        let p = d.join("config.json");
        let mut b = std::fs::read(&p).unwrap();
        let i = b.windows(5).position(|w| w == b"qwen3").unwrap();
        b[i + 1] = 0xff;
        std::fs::write(&p, b).unwrap();
    });
    v.push(case(
        c,
        "invalid UTF-8 in config.json",
        &d,
        &["config.json"],
    ));
    let d = checkpoint(dir, "no-tokenizer", |d| {
        std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    });
    v.push(run_case(
        c,
        "missing tokenizer.json",
        &d,
        &["tokenizer.json", "missing"],
    ));
    let d = checkpoint(dir, "escaping-shard", |d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(
            d.join("model.safetensors.index.json"),
            br#"{"weight_map": {"model.norm.weight": "../../etc/passwd"}}"#,
        )
        .unwrap();
    });
    v.push(case(c, "shard path escapes the directory", &d, &["passwd"]));
    let d = checkpoint(dir, "missing-shard", |d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(
            d.join("model.safetensors.index.json"),
            br#"{"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}"#,
        )
        .unwrap();
    });
    v.push(case(
        c,
        "missing shard",
        &d,
        &["model-00001-of-00002.safetensors"],
    ));
    let d = checkpoint(dir, "nan-weights", |d| {
        edit_safetensors(d, |h, data| {
            let at = h["model.layers.0.mlp.up_proj.weight"]["data_offsets"][0]
                .as_u64()
                .unwrap() as usize;
            data[at + 6..at + 8].copy_from_slice(&[0x00, 0x7e]); // f16 NaN
        })
    });
    let mut k = case(
        c,
        "NaN in a weight (export)",
        &d,
        &[
            "model.layers.0.mlp.up_proj.weight",
            "NaN",
            "--allow-nonfinite",
        ],
    );
    k.args = vec![
        "export".into(),
        d.display().to_string(),
        "-o".into(),
        dir.join("nan.pocket").display().to_string(),
    ];
    v.push(k);

    // --- GGUF ---
    let g = "GGUF";
    let good = std::fs::read(root().join("fixtures/gguf/llama-tiny-f32.gguf")).unwrap();
    let map = gguf_map(&good);
    let mut b = good.clone();
    b[3] = b'X';
    v.push(case(
        g,
        "wrong magic",
        &write(dir, "magic.gguf", &b),
        &["magic.gguf", "not a model"],
    ));
    let mut b = good.clone();
    b[4..8].copy_from_slice(&7u32.to_le_bytes());
    v.push(case(
        g,
        "unsupported version",
        &write(dir, "version.gguf", &b),
        &["version.gguf", "version 7"],
    ));
    v.push(case(
        g,
        "truncated in the fixed header",
        &write(dir, "t-head.gguf", &good[..20]),
        &["t-head.gguf", "truncated"],
    ));
    v.push(case(
        g,
        "truncated at the end of the metadata",
        &write(dir, "t-meta.gguf", &good[..map.meta_end]),
        &["t-meta.gguf", "truncated"],
    ));
    v.push(case(
        g,
        "truncated inside the metadata",
        &write(dir, "t-meta2.gguf", &good[..map.meta_end - 3]),
        &["t-meta2.gguf"],
    ));
    v.push(case(
        g,
        "truncated at the end of the tensor infos",
        &write(dir, "t-infos.gguf", &good[..map.infos_end]),
        &["t-infos.gguf", "past the end"],
    ));
    v.push(case(
        g,
        "truncated in the tensor data",
        &write(dir, "t-data.gguf", &good[..good.len() - 1000]),
        &["t-data.gguf", "past the end"],
    ));
    let mut b = good.clone();
    b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    v.push(case(
        g,
        "tensor count 2^60",
        &write(dir, "count.gguf", &b),
        &["count.gguf", "cannot fit"],
    ));
    let mut b = good.clone();
    b[24..32].copy_from_slice(&(1u64 << 63).to_le_bytes());
    v.push(case(
        g,
        "string length 2^63",
        &write(dir, "strlen.gguf", &b),
        &["strlen.gguf", "longer than the rest"],
    ));
    let mut b = good.clone();
    b[map.arch_value + 1] = 0xff;
    v.push(case(
        g,
        "invalid UTF-8 in a metadata value",
        &write(dir, "utf8.gguf", &b),
        &["utf8.gguf", "UTF-8"],
    ));
    let mut b = good.clone();
    let (first, first_off) = (map.infos[0].0.clone().leak() as &str, map.infos[0].1);
    let (_, second_off) = map.infos[1];
    let off = b[first_off..first_off + 8].to_vec();
    b[second_off..second_off + 8].copy_from_slice(&off);
    v.push(case(
        g,
        "two tensors at the same offset (overlap)",
        &write(dir, "overlap.gguf", &b),
        &["overlap.gguf", "overlap", first],
    ));
    let mut b = good.clone();
    b[map.infos[0].1..map.infos[0].1 + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    v.push(case(
        g,
        "tensor offset past the end",
        &write(dir, "offset.gguf", &b),
        &["offset.gguf", "past the end"],
    ));
    let mut b = good.clone();
    let (name0, name1) = (map.infos[0].0.clone(), map.infos[1].0.clone());
    assert_eq!(name0.len(), name1.len(), "fixture tensor names");
    let at = b
        .windows(name1.len())
        .position(|w| w == name1.as_bytes())
        .unwrap();
    b[at..at + name1.len()].copy_from_slice(name0.as_bytes());
    v.push(case(
        g,
        "duplicate tensor name",
        &write(dir, "dup.gguf", &b),
        &["dup.gguf", "twice"],
    ));
    let mut b = good.clone();
    b[map.infos[0].1 - 4..map.infos[0].1].copy_from_slice(&77u32.to_le_bytes());
    v.push(case(
        g,
        "unknown tensor type",
        &write(dir, "ggmltype.gguf", &b),
        &["ggmltype.gguf", "77"],
    ));
    let mut b = good.clone();
    // The first tensor's first dimension: 2^40 × 2^40 overflows nothing but cannot fit; the
    // second dimension times 2^62 overflows u64.
    let q = map
        .infos
        .iter()
        .find(|i| i.0.ends_with("attn_q.weight"))
        .unwrap()
        .1;
    let dims_at = q - 4 - 16;
    b[dims_at..dims_at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    b[dims_at + 8..dims_at + 16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    v.push(case(
        g,
        "dimension product overflows u64",
        &write(dir, "dims.gguf", &b),
        &["dims.gguf", "overflow"],
    ));

    // --- .pocket ---
    let p = "pocket";
    let good_pocket = dir.join("good.pocket");
    let (src, dest) = (
        tiny("qwen3-tiny"),
        good_pocket.to_str().unwrap().to_string(),
    );
    let src = src.to_str().unwrap();
    crate::common::pocket_ok(&["export", src, "-o", &dest, "--calib", "none", "--json"]);
    let good = std::fs::read(&good_pocket).unwrap();
    let mut b = good.clone();
    b[0] = b'Q';
    v.push(case(
        p,
        "wrong magic",
        &write(dir, "magic.pocket", &b),
        &["magic.pocket", "not a model"],
    ));
    let mut b = good.clone();
    b[8..12].copy_from_slice(&9u32.to_le_bytes());
    v.push(case(
        p,
        "unsupported version",
        &write(dir, "version.pocket", &b),
        &["version.pocket", "version 9"],
    ));
    let mut b = good.clone();
    b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    v.push(case(
        p,
        "header length 2^60",
        &write(dir, "hlen.pocket", &b),
        &["hlen.pocket", "past the end"],
    ));
    let mut b = good.clone();
    b[40] ^= 1;
    v.push(run_case(
        p,
        "header checksum fails (run refuses)",
        &write(dir, "hsum.pocket", &b),
        &["hsum.pocket", "checksum"],
    ));
    let data_at = u32::from_le_bytes(good[12..16].try_into().unwrap()) as usize;
    let hlen = u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&good[32..32 + hlen]).unwrap();
    let t0 = &header["tensors"][3];
    let flip_at = data_at + t0["offset"].as_u64().unwrap() as usize + 5;
    let mut b = good.clone();
    b[flip_at] ^= 0x10;
    let mut k = case(
        p,
        "one flipped byte in a tensor (inspect --verify)",
        &write(dir, "flip.pocket", &b),
        &[
            "flip.pocket",
            t0["name"].as_str().unwrap().to_string().leak(),
        ],
    );
    k.args = vec![
        "inspect".into(),
        "--verify".into(),
        dir.join("flip.pocket").display().to_string(),
    ];
    v.push(k);
    v.push(run_case(
        p,
        "one flipped byte in a tensor (run refuses it at load)",
        &dir.join("flip.pocket"),
        &[
            "flip.pocket",
            "damaged",
            t0["name"].as_str().unwrap().to_string().leak(),
            "--no-verify",
        ],
    ));
    v.push(case(
        p,
        "truncated in the data section",
        &write(dir, "trunc.pocket", &good[..good.len() - 64]),
        &["trunc.pocket", "past the end"],
    ));
    v.push(case(
        p,
        "truncated inside the header",
        &write(dir, "trunc-h.pocket", &good[..100]),
        &["trunc-h.pocket", "past the end"],
    ));
    let b = edit_pocket(&good, |h| {
        h["tensors"][2]["offset"] = h["tensors"][1]["offset"].clone()
    });
    v.push(case(
        p,
        "two tensors share bytes (overlap)",
        &write(dir, "overlap.pocket", &b),
        &["overlap.pocket", "overlap"],
    ));
    let b = edit_pocket(&good, |h| h["tensors"][1]["offset"] = (1u64 << 62).into());
    v.push(case(
        p,
        "tensor offset past the end",
        &write(dir, "offset.pocket", &b),
        &["offset.pocket", "past the end"],
    ));
    let b = edit_pocket(&good, |h| {
        h["tensors"][1]["shape"] = serde_json::json!([1u64 << 40, 1u64 << 40])
    });
    v.push(case(
        p,
        "dimension product overflows",
        &write(dir, "dims.pocket", &b),
        &["dims.pocket"],
    ));
    let b = edit_pocket(&good, |h| h["tensors"][1]["dtype"] = "q3_k".into());
    v.push(case(
        p,
        "unknown storage type",
        &write(dir, "dtype.pocket", &b),
        &["dtype.pocket", "q3_k"],
    ));
    let b = edit_pocket(&good, |h| {
        let t = h["tensors"][1].clone();
        h["tensors"].as_array_mut().unwrap().push(t);
    });
    v.push(case(
        p,
        "duplicate tensor name",
        &write(dir, "dup.pocket", &b),
        &["dup.pocket", "twice"],
    ));
    let b = edit_pocket(&good, |h| h["spec"]["hidden_size"] = 128.into());
    v.push(run_case(
        p,
        "header spec disagrees with tensor shapes",
        &write(dir, "spec.pocket", &b),
        &["spec.pocket"],
    ));

    // --- templates, run time, usage ---
    let t = "runtime";
    let d = checkpoint(dir, "template-memory", |d| {
        std::fs::write(
            d.join("chat_template.jinja"),
            "{% set s = namespace(x='ab') %}{% for i in range(64) %}{% set s.x = s.x ~ s.x %}{% endfor %}{{ s.x }}",
        )
        .unwrap();
    });
    v.push(run_case(
        t,
        "chat template doubling a string 64 times",
        &d,
        &["chat_template.jinja", "MiB of memory"],
    ));
    let d = checkpoint(dir, "template-loop", |d| {
        std::fs::write(
            d.join("chat_template.jinja"),
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        )
        .unwrap();
    });
    v.push(run_case(
        t,
        "chat template looping 10^10 times",
        &d,
        &["chat_template.jinja", "fuel"],
    ));
    let d = checkpoint(dir, "template-recursion", |d| {
        std::fs::write(
            d.join("chat_template.jinja"),
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        )
        .unwrap();
    });
    v.push(run_case(
        t,
        "chat template recursing without end",
        &d,
        &["chat_template.jinja"],
    ));
    v.push(Case {
        format: t,
        what: "prompt longer than the context",
        args: vec![
            "run".into(),
            tiny("qwen3-tiny").display().to_string(),
            "-p".into(),
            "word ".repeat(600),
        ],
        stdin: None,
        code: 1,
        needles: vec!["prompt needs", "positions"],
    });
    v.push(Case {
        format: t,
        what: "invalid UTF-8 on stdin",
        args: vec![
            "run".into(),
            tiny("qwen3-tiny").display().to_string(),
            "-n".into(),
            "2".into(),
        ],
        stdin: Some(b"hi \xff\xfe there".to_vec()),
        code: 1,
        needles: vec!["stdin", "UTF-8", "byte 3"],
    });
    // Structured output: each bad schema, grammar, regex, choice list or tools file is refused
    // before generation, naming the flag, the file and the place.
    let model = tiny("qwen2-tiny").display().to_string();
    let shaped = |what: &'static str, flag: &str, value: String, needles: &[&'static str]| Case {
        format: "structured",
        what,
        args: vec![
            "run".into(),
            model.clone(),
            "-p".into(),
            "hi".into(),
            flag.into(),
            value,
        ],
        stdin: None,
        code: 1,
        needles: needles.to_vec(),
    };
    let file = |name: &str, text: &str| write(dir, name, text.as_bytes()).display().to_string();
    v.push(shaped(
        "schema file is not JSON",
        "--json-schema",
        file(
            "broken.schema.json",
            "{\"type\": \"object\",\n \"properties\": {]}",
        ),
        &["broken.schema.json", "line 2 column"],
    ));
    v.push(shaped(
        "schema file missing",
        "--json-schema",
        dir.join("absent.json").display().to_string(),
        &["--json-schema", "absent.json", "No such file"],
    ));
    v.push(shaped(
        "unsupported schema keyword",
        "--json-schema",
        r#"{"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}}"#
            .into(),
        &["/properties/tags/uniqueItems", "not supported"],
    ));
    v.push(shaped(
        "schema pattern is not a regex",
        "--json-schema",
        r#"{"properties": {"date": {"type": "string", "pattern": "[0-9"}}}"#.into(),
        &["/properties/date/pattern", "unclosed character class"],
    ));
    v.push(shaped(
        "oneOf branches overlap",
        "--json-schema",
        r#"{"oneOf": [{"type": "number"}, {"type": "integer"}]}"#.into(),
        &["/oneOf", "branches 0 and 1"],
    ));
    v.push(shaped(
        "unknown string format",
        "--json-schema",
        r#"{"type": "string", "format": "postcode"}"#.into(),
        &["Unknown format", "postcode"],
    ));
    v.push(shaped(
        "unsatisfiable schema",
        "--json-schema",
        r#"{"type": "integer", "minimum": 5, "maximum": 2}"#.into(),
        &["minimum (5) is greater than maximum (2)"],
    ));
    v.push(shaped(
        "schema is not an object",
        "--json-schema",
        file("list.json", "[1, 2]"),
        &["list.json", "object or a boolean"],
    ));
    v.push(shaped(
        "Lark grammar error",
        "--grammar",
        file("bad.lark", "start: item\nitem: \"a\" | missing_rule\n"),
        &["bad.lark", "missing_rule"],
    ));
    v.push(shaped(
        "GBNF rule undefined",
        "--grammar",
        file("bad.gbnf", "root ::= greeting\n"),
        &["bad.gbnf", "line 1", "\"greeting\" is not defined"],
    ));
    v.push(shaped(
        "GBNF unterminated string",
        "--grammar",
        file("bad2.gbnf", "root ::= \"a\"\nx ::= \"open\n"),
        &["bad2.gbnf", "line 2", "string"],
    ));
    v.push(shaped(
        "empty grammar file",
        "--grammar",
        file("empty.lark", "  \n"),
        &["empty.lark", "empty"],
    ));
    v.push(shaped(
        "regex does not parse",
        "--regex",
        "(ab".into(),
        &["--regex", "not a regular expression", "unclosed group"],
    ));
    v.push(shaped(
        "empty choice list",
        "--choices",
        "".into(),
        &["--choices", "choice 1 is empty"],
    ));
    v.push(shaped(
        "duplicate choice",
        "--choices",
        "yes,no,yes".into(),
        &["--choices", "\"yes\" is listed twice"],
    ));
    v.push(shaped(
        "tools file is not an array",
        "--tools",
        file("tools-obj.json", "{\"name\": \"x\"}"),
        &["tools-obj.json", "array of tools"],
    ));
    v.push(shaped(
        "tool without a name",
        "--tools",
        file(
            "tools-noname.json",
            "[{\"type\": \"function\", \"function\": {\"parameters\": {}}}]",
        ),
        &["tools-noname.json", "tools[0]", "\"name\""],
    ));
    v.push(shaped(
        "tool parameters not an object schema",
        "--tools",
        file("tools-params.json", "[{\"name\": \"a\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"not\": {}}}}}]"),
        &["tools-params.json", "tools[0]: parameters/properties/x/not"],
    ));
    let mut unknown_tool = shaped(
        "tool choice names no tool",
        "--tools",
        file("tools-ok.json", "[{\"name\": \"get_weather\"}]"),
        &["--tool-choice lookup", "get_weather"],
    );
    unknown_tool
        .args
        .extend(["--tool-choice".into(), "lookup".into()]);
    v.push(unknown_tool);
    let mut cut = shaped(
        "schema cannot finish within -n",
        "--json-schema",
        r#"{"type": "string", "minLength": 100}"#.into(),
        &["before it completed", "--json-schema", "-n N"],
    );
    cut.args.extend(["-n".into(), "5".into()]);
    v.push(cut);
    v.push(Case {
        format: "usage",
        what: "two constraints at once",
        args: vec![
            "run".into(),
            model.clone(),
            "-p".into(),
            "hi".into(),
            "--regex".into(),
            "a".into(),
            "--choices".into(),
            "a,b".into(),
        ],
        stdin: None,
        code: 2,
        needles: vec!["--choices", "--regex"],
    });
    // Speculative decoding: a draft must share the model's tokenizer, and come with its mode.
    let qwen2 = tiny("qwen2-tiny").display().to_string();
    let llama = tiny("llama-tiny").display().to_string();
    let spec = |what, extra: &[&str], code, needles: &[&'static str]| {
        let mut args: Vec<String> = vec!["run".into(), qwen2.clone(), "-p".into(), "hi".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Case {
            format: "speculation",
            what,
            args,
            stdin: None,
            code,
            needles: needles.to_vec(),
        }
    };
    v.push(spec(
        "draft with another tokenizer",
        &["--draft", &llama],
        1,
        &["llama-tiny", "qwen2-tiny", "tokenizer"],
    ));
    v.push(spec(
        "draft mode without a draft",
        &["--speculate", "draft"],
        1,
        &["--speculate draft needs --draft"],
    ));
    v.push(spec(
        "draft that is not a model",
        &["--draft", &dir.join("nowhere.gguf").display().to_string()],
        1,
        &["the draft model", "nowhere.gguf"],
    ));
    v.push(spec(
        "speculation with a constraint",
        &["--speculate", "lookup", "--choices", "a,b"],
        1,
        &["--speculate", "does not combine"],
    ));
    v.push(spec(
        "draft tokens out of range",
        &["--speculate", "lookup", "--draft-tokens", "16"],
        2,
        &["--draft-tokens", "16"],
    ));
    // Decisions: requests, flags and heads.
    let decide = |what: &'static str,
                  args: Vec<String>,
                  stdin: Option<&str>,
                  code,
                  needles: &[&'static str]| Case {
        format: "decision",
        what,
        args: [vec!["decide".to_string(), qwen2.clone()], args].concat(),
        stdin: stdin.map(|s| s.as_bytes().to_vec()),
        code,
        needles: needles.to_vec(),
    };
    let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    v.push(decide(
        "request that is not JSON",
        strings(&["--request", "-"]),
        Some("{\"state\": "),
        1,
        &["stdin", "not a JSON request"],
    ));
    v.push(decide(
        "request with an empty criteria",
        strings(&["--request", "-"]),
        Some(r#"{"state": "x", "questions": {"q": {"type": "choice", "criteria": {}}}}"#),
        1,
        &["body.questions.q.criteria", "at least 1 item"],
    ));
    v.push(decide(
        "unknown question type",
        strings(&["--request", "-"]),
        Some(r#"{"state": "x", "questions": {"q": {"type": "rank"}}}"#),
        1,
        &["body.questions.q", "rank"],
    ));
    v.push(decide(
        "too many options",
        strings(&["--request", "-"]),
        Some(&format!(
            r#"{{"state": "x", "questions": {{"q": {{"type": "choice", "criteria": {{{}}}}}}}}}"#,
            (0..300)
                .map(|i| format!("\"k{i}\": null"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        1,
        &["300 options", "at most 255"],
    ));
    v.push(decide(
        "score with 11 levels",
        strings(&[
            "--state", "x", "--score", "How?", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
            "10",
        ]),
        None,
        1,
        &["11 levels", "at most 10"],
    ));
    v.push(decide(
        "a state longer than the context",
        strings(&["--state", &"x ".repeat(5000), "--noul", "Yes?"]),
        None,
        1,
        &["context holds 256", "tokens"],
    ));
    v.push(decide(
        "no question",
        strings(&["--state", "x"]),
        None,
        1,
        &["at least one question"],
    ));
    v.push(decide(
        "unknown readout",
        strings(&["--state", "x", "--noul", "q", "--readout", "logits"]),
        None,
        1,
        &["--readout logits", "constrained, keys, letters"],
    ));
    v.push(decide(
        "pointer readout without a head",
        strings(&["--state", "x", "--noul", "q", "--readout", "pointer"]),
        None,
        1,
        &["pointer readout needs a head"],
    ));
    let head_dir = root().join("fixtures/decide");
    let header = serde_json::json!({"__metadata__": {
        "format": "pocket-decision-head", "version": "1", "kind": "temperature",
        "style": "keys", "order": "state-first", "reverse": "false", "hidden_size": "896",
        "temperature.choice": "0.8"}})
    .to_string();
    let mut wide = (header.len() as u64).to_le_bytes().to_vec();
    wide.extend_from_slice(header.as_bytes());
    let wide = write(dir, "wide.head", &wide);
    v.push(decide(
        "head for another hidden size",
        strings(&[
            "--state",
            "x",
            "--noul",
            "q",
            "--head",
            &wide.display().to_string(),
        ]),
        None,
        1,
        &["hidden size of 896", "64"],
    ));
    v.push(decide(
        "probe head for another question",
        strings(&[
            "--state",
            "x",
            "--choice",
            "Which?",
            "a",
            "b",
            "--head",
            &head_dir
                .join("qwen2-tiny.probe.safetensors")
                .display()
                .to_string(),
        ]),
        None,
        1,
        &["probe head was trained on another question"],
    ));
    let truncated = write(
        dir,
        "truncated.head",
        &std::fs::read(head_dir.join("qwen2-tiny.pointer.safetensors")).unwrap()[..300],
    );
    v.push(decide(
        "truncated head file",
        strings(&[
            "--state",
            "x",
            "--noul",
            "q",
            "--head",
            &truncated.display().to_string(),
        ]),
        None,
        1,
        &["truncated.head", "not a safetensors file"],
    ));
    let mut nan = std::fs::read(head_dir.join("qwen2-tiny.pointer.safetensors")).unwrap();
    let n = nan.len();
    nan[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
    let nan = write(dir, "nan.head", &nan);
    v.push(decide(
        "NaN in a head",
        strings(&[
            "--state",
            "x",
            "--noul",
            "q",
            "--head",
            &nan.display().to_string(),
        ]),
        None,
        1,
        &["nan.head", "NaN"],
    ));
    v.push(decide(
        "a model file as a head",
        strings(&[
            "--state",
            "x",
            "--noul",
            "q",
            "--head",
            &tiny("qwen2-tiny")
                .join("model.safetensors")
                .display()
                .to_string(),
        ]),
        None,
        1,
        &["not a decision head"],
    ));
    // LoRA adapters: each refused in one line naming the file and what is wrong.
    let adapter = |name: &str, f: &dyn Fn(&Path)| -> String {
        let d = dir.join(name);
        copy_dir(&root().join("fixtures/lora/qwen2-tiny/all"), &d);
        f(&d);
        d.display().to_string()
    };
    let lora = |what: &'static str, path: String, needles: &[&'static str]| Case {
        format: "LoRA adapter",
        what,
        args: vec![
            "run".into(),
            qwen2.clone(),
            "-p".into(),
            "hi".into(),
            "--lora".into(),
            path,
        ],
        stdin: None,
        code: 1,
        needles: needles.to_vec(),
    };
    let edit_adapter = |d: &Path, f: &dyn Fn(&mut Value, &mut Vec<u8>)| {
        let p = d.join("adapter_model.safetensors");
        let (mut h, mut data) = st_split(&p);
        f(&mut h, &mut data);
        st_join(&p, &serde_json::to_vec(&h).unwrap(), &data);
    };
    let q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    v.push(lora(
        "for another base (a llama adapter on qwen2)",
        root()
            .join("fixtures/lora/llama-tiny/all")
            .display()
            .to_string(),
        &[
            "llama-tiny/all",
            "an adapter for a llama model; the base is qwen2",
        ],
    ));
    v.push(lora(
        "a module's shape differs from the base's",
        adapter("lora-shape", &|d| {
            edit_adapter(d, &|h, data| {
                // q_proj's A takes 32 inputs: [4, 32], its first 512 bytes kept.
                resize_tensor(h, data, q_a, &[4, 32], 512);
            })
        }),
        &[
            "model.layers.0.self_attn.q_proj.weight",
            "the adapter's weight is [64, 32]; the base's is [64, 64]",
        ],
    ));
    v.push(lora(
        "rank of A and B disagree",
        adapter("lora-rank", &|d| {
            edit_adapter(d, &|h, _| {
                h[q_a]["shape"] = serde_json::json!([2, 128]);
            })
        }),
        &["model.layers.0.self_attn.q_proj", "do not share a rank"],
    ));
    v.push(lora(
        "DoRA",
        adapter("lora-dora", &|d| {
            edit_json(&d.join("adapter_config.json"), |c| {
                c["use_dora"] = Value::Bool(true)
            })
        }),
        &["adapter_config.json", "DoRA"],
    ));
    v.push(lora(
        "another PEFT method (LoHa)",
        adapter("lora-loha", &|d| {
            edit_json(&d.join("adapter_config.json"), |c| {
                c["peft_type"] = Value::from("LOHA")
            })
        }),
        &["adapter_config.json", "a LOHA adapter"],
    ));
    v.push(lora(
        "truncated safetensors",
        adapter("lora-trunc", &|d| {
            let p = d.join("adapter_model.safetensors");
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, &b[..b.len() / 2]).unwrap();
        }),
        &["adapter_model.safetensors", "truncated"],
    ));
    v.push(lora(
        "NaN in an adapter",
        adapter("lora-nan", &|d| {
            edit_adapter(d, &|h, data| {
                let at = h[q_a]["data_offsets"][0].as_u64().unwrap() as usize;
                data[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
            })
        }),
        &["q_proj.lora_A.weight", "NaN"],
    ));
    v.push(lora(
        "a model GGUF as an adapter",
        root()
            .join("fixtures/gguf/llama-tiny-q8_0.gguf")
            .display()
            .to_string(),
        &["llama-tiny-q8_0.gguf", "not a LoRA adapter"],
    ));
    v.push(lora(
        "a file that is neither",
        write(dir, "notes.txt", b"hello").display().to_string(),
        &["notes.txt", "not a LoRA adapter"],
    ));
    v.push(lora(
        "a bad scale",
        format!(
            "{}:inf",
            root().join("fixtures/lora/qwen2-tiny/all").display()
        ),
        &["the scale inf is not a finite number"],
    ));
    v.push(Case {
        format: "usage",
        what: "unknown KV cache type",
        args: vec![
            "run".into(),
            qwen2.clone(),
            "-p".into(),
            "hi".into(),
            "--kv".into(),
            "q5".into(),
        ],
        stdin: None,
        code: 2,
        needles: vec!["--kv", "q5", "q8"],
    });
    v.push(Case {
        format: "usage",
        what: "unknown option",
        args: vec!["run".into(), "--frobnicate".into()],
        stdin: None,
        code: 2,
        needles: vec!["--frobnicate"],
    });
    v.push(Case {
        format: "usage",
        what: "missing model path",
        args: vec!["inspect".into(), dir.join("nowhere").display().to_string()],
        stdin: None,
        code: 1,
        needles: vec!["nowhere", "no such file"],
    });
    v
}

#[test]
fn every_bad_input_fails_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cases = cases(dir);
    assert!(cases.len() >= 25, "{} cases", cases.len());
    let mut table =
        String::from("| input | case | command | exit | message |\n|---|---|---|---|---|\n");
    let mut failures = Vec::new();
    for c in &cases {
        let mut cmd = crate::common::pocket_command();
        cmd.args(&c.args)
            .stdin(if c.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = &c.stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let first = err.lines().next().unwrap_or("").to_string();
        let ok = out.status.code() == Some(c.code)
            && !err.contains("panicked")
            && (c.code == 2 || err.trim_end().lines().count() == 1)
            && first.starts_with("error")
            && c.needles.iter().all(|n| err.contains(n));
        if !ok {
            failures.push(format!(
                "{} / {}: exit {:?}: {err}",
                c.format,
                c.what,
                out.status.code()
            ));
        }
        let shown = first
            .replace(&dir.display().to_string(), "$TMP")
            .replace(&root().display().to_string(), ".");
        let verb = c.args[0].clone()
            + if c.args.get(1).is_some_and(|a| a.starts_with("--v")) {
                " --verify"
            } else {
                ""
            };
        table.push_str(&format!(
            "| {} | {} | `{}` | {} | `` {} `` |\n",
            c.format,
            c.what,
            verb,
            out.status.code().unwrap_or(-1),
            shown
                .replace('|', "\\|")
                .chars()
                .take(230)
                .collect::<String>()
        ));
    }
    // No case may leave an output file behind.
    assert!(!dir.join("nan.pocket").exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("robustness-table.md");
    std::fs::write(&out, &table).unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
