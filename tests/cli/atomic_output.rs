//! Output appears whole or not at all: an export killed with SIGKILL at any point leaves either
//! no file or a complete, valid one under the final name; a full disk gives a clear error and
//! leaves no temporary file.

use pocket_formats::pocket::reader::PocketFile;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::tiny;

/// A random llama checkpoint big enough that export takes a noticeable time (about 6 M
/// parameters, bf16), with the tiny fixture's tokenizer.
fn medium_checkpoint(dir: &Path) -> PathBuf {
    let (h, ffn, layers, vocab, heads, kv, hd) = (256usize, 768usize, 6usize, 4096usize, 4, 2, 64);
    let d = dir.join("medium");
    std::fs::create_dir_all(&d).unwrap();
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ] {
        std::fs::copy(tiny("qwen3-tiny").join(f), d.join(f)).unwrap();
    }
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": h, "intermediate_size": ffn,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"
    });
    std::fs::write(d.join("config.json"), config.to_string()).unwrap();
    let mut tensors: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![vocab, h]),
        ("model.norm.weight".into(), vec![h]),
    ];
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        for (n, shape) in [
            ("self_attn.q_proj.weight", vec![heads * hd, h]),
            ("self_attn.k_proj.weight", vec![kv * hd, h]),
            ("self_attn.v_proj.weight", vec![kv * hd, h]),
            ("self_attn.o_proj.weight", vec![h, heads * hd]),
            ("mlp.gate_proj.weight", vec![ffn, h]),
            ("mlp.up_proj.weight", vec![ffn, h]),
            ("mlp.down_proj.weight", vec![h, ffn]),
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
        ] {
            tensors.push((format!("{p}.{n}"), shape));
        }
    }
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for (name, shape) in &tensors {
        let n: usize = shape.iter().product();
        let start = data.len();
        for _ in 0..n {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let x = ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
                + if shape.len() == 1 { 1.0 } else { 0.0 };
            data.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes());
        }
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let json = serde_json::to_vec(&header).unwrap();
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&json);
    file.extend_from_slice(&data);
    std::fs::write(d.join("model.safetensors"), file).unwrap();
    d
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp-"))
        .collect()
}

fn valid(path: &Path) -> bool {
    PocketFile::open(path).is_ok_and(|f| f.verify().is_empty())
}

#[test]
fn sigkill_during_export_never_leaves_a_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = medium_checkpoint(tmp.path());
    let outdir = tmp.path().join("out");
    std::fs::create_dir(&outdir).unwrap();
    let dest = outdir.join("m.pocket");
    let export = || {
        crate::common::pocket_command()
            .args([
                "export",
                src.to_str().unwrap(),
                "-o",
                dest.to_str().unwrap(),
                "--json",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // A complete run first: its size sets the kill points.
    assert!(export().wait().unwrap().success());
    assert!(valid(&dest));
    let full = std::fs::metadata(&dest).unwrap().len();
    std::fs::remove_file(&dest).unwrap();

    // Kill points: while loading/calibrating (no temp file yet), then at growing fractions of
    // the bytes written to the temporary file.
    let points: [Option<f64>; 7] = [
        None,
        Some(0.0),
        Some(0.2),
        Some(0.4),
        Some(0.6),
        Some(0.8),
        Some(0.98),
    ];
    let mut mid_write = 0;
    for point in points {
        let _ = std::fs::remove_file(&dest);
        let mut child = export();
        let start = Instant::now();
        loop {
            let tmpf = temp_files(&outdir);
            let written = tmpf
                .first()
                .and_then(|p| std::fs::metadata(p).ok())
                .map(|m| m.len());
            let due = match (point, written) {
                (None, _) => start.elapsed() > Duration::from_millis(30),
                (Some(f), Some(w)) => w as f64 >= f * full as f64 && w > 0,
                (Some(_), None) => false,
            };
            if due
                || child.try_wait().unwrap().is_some()
                || start.elapsed() > Duration::from_secs(120)
            {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let killed_mid_write = !temp_files(&outdir).is_empty();
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        if dest.exists() {
            assert!(
                valid(&dest),
                "kill at {point:?}: the final name holds a damaged file"
            );
        } else if killed_mid_write {
            mid_write += 1;
        }
    }
    assert!(
        mid_write >= 4,
        "only {mid_write} kills landed while the file was being written"
    );
    // A killed run's temporary file is left (nothing can run after SIGKILL); the next export
    // removes it once its process is gone, and succeeds.
    assert!(export().wait().unwrap().success());
    assert!(valid(&dest));
    assert!(temp_files(&outdir).is_empty(), "{:?}", temp_files(&outdir));
}

#[test]
fn a_full_disk_is_a_clear_error_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("m.pocket");
    // `ulimit -f` caps the size of any file the process writes (in KiB): writes past it fail
    // with EFBIG, as on a full disk (SIGXFSZ ignored so the write returns the error).
    let script = format!(
        "trap '' XFSZ; ulimit -f 40; exec '{}' export '{}' -o '{}' --quant f32",
        crate::common::pocket_argv().join("' '"),
        tiny("qwen3-tiny").display(),
        dest.display()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("m.pocket") && err.contains("too large"),
        "{err}"
    );
    assert!(!dest.exists());
    assert!(
        temp_files(tmp.path()).is_empty(),
        "{:?}",
        temp_files(tmp.path())
    );
}
