//! Source → `.pocket`: each tensor is read, given its storage type by the recipe, encoded by
//! its codec and streamed to the atomic writer, one tensor at a time (bounded memory: one
//! tensor in f32 plus its encoding).

use crate::model_file::ModelFile;
use crate::pocket::writer::PocketWriter;
use crate::pocket::{
    BlobEntry, Layout, PocketHeader, Provenance, SourceFile, TensorEntry, TOKENIZER_BLOB,
};
use crate::quant::search::Method;
use crate::quant::{dense, q4, q8, rows16, ErrorStats, QuantType};
use crate::recipe::{QatMode, Recipe};
use crate::FormatError;
use serde::Serialize;
use std::path::Path;

/// What happened to one tensor.
#[derive(Clone, Debug, Serialize)]
pub struct TensorReport {
    pub name: String,
    pub dtype: QuantType,
    pub shape: Vec<usize>,
    pub bytes: u64,
    pub rel_rms: f64,
    pub max_abs: f64,
    /// Q4 blocks stored exactly from a QAT grid, and the total number of blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qat_blocks: Option<(usize, usize)>,
    /// A few off-grid blocks as (row, block), when some blocks were on a grid.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub off_grid: Vec<(usize, usize)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A GGUF's quantized blocks copied as they are (the same weights bit for bit), as against
    /// a `ggml_*` type the export encoded itself.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub carried: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConvertReport {
    pub output: String,
    pub file_bytes: u64,
    pub parameters: u64,
    /// Over all quantized tensors, weighted by their squared norm.
    pub rel_rms: f64,
    pub tensors: Vec<TensorReport>,
}

/// Progress: parameters done, parameters in all, the tensor just finished.
pub type Progress<'a> = &'a (dyn Fn(u64, u64, &str) + Sync);

/// Mean squared activation per input column of each linear weight, by tensor name (from
/// running the model on calibration text).
pub type Importance = std::collections::HashMap<String, Vec<f32>>;

/// GPTQ's compensation for each weight it applies to, by tensor name (`--gptq`).
pub type Compensations =
    std::collections::HashMap<String, std::sync::Arc<crate::quant::gptq::Compensation>>;

/// Values added to tensors before they are stored (a LoRA adapter merged at export: `s·B·A`),
/// computed one tensor at a time. An edited tensor is always encoded from f32, never copied.
pub trait Edits: Sync {
    /// Whether tensor `name` (an HF name) is edited.
    fn contains_key(&self, name: &str) -> bool;
    /// What to add to tensor `name`'s values (row-major, HF order).
    fn delta(&self, name: &str) -> Option<Vec<f32>>;
}

/// A tensor's f32 values with its edit (if any) added; the shapes must agree.
pub fn edited(
    source: &ModelFile,
    name: &str,
    edits: Option<&dyn Edits>,
) -> Result<Vec<f32>, FormatError> {
    let mut v = source.read_f32(name)?;
    if let Some(d) = edits.and_then(|e| e.delta(name)) {
        if d.len() != v.len() {
            return Err(FormatError::BadTensor {
                path: source.path().to_path_buf(),
                name: name.into(),
                reason: format!("an edit of {} values for {} stored", d.len(), v.len()),
            });
        }
        v.iter_mut().zip(d).for_each(|(x, dx)| *x += dx);
    }
    Ok(v)
}

/// One tensor of the file being planned: the source tensor, its storage type, a note and its
/// shape.
type Planned<'a> = (
    &'a crate::model_file::SourceTensor,
    QuantType,
    Option<String>,
    Vec<usize>,
);

/// Each tensor's storage type, the file's header and the packed tokenizer.
fn plan_file<'a>(
    source: &ModelFile,
    tensors: &'a [crate::model_file::SourceTensor],
    recipe: &Recipe,
    edits: Option<&dyn Edits>,
) -> Result<(Vec<Planned<'a>>, PocketHeader, Vec<u8>), FormatError> {
    let mut plan = Vec::with_capacity(tensors.len());
    for t in tensors {
        let (mut dtype, mut note) = recipe.storage_for(&t.name, &t.shape);
        let overridden = recipe
            .overrides
            .iter()
            .any(|(p, _)| crate::recipe::glob_match(p, &t.name));
        match t.stored {
            // A GGUF's blocks are kept as they are, unless re-quantizing was asked for, a
            // pattern names the tensor or an edit (a merged adapter) changes it.
            Some(q @ QuantType::Ggml(_)) => {
                let edited = edits.is_some_and(|e| e.contains_key(&t.name));
                if recipe.keep_source_blocks && !overridden && !edited {
                    dtype = q;
                    note = None;
                }
            }
            // Beside kept blocks, a GGUF's dense matrices stay as they were too.
            Some(q @ (QuantType::F32 | QuantType::F16 | QuantType::BF16))
                if recipe.keep_source_blocks
                    && source.is_gguf()
                    && !overridden
                    && !edits.is_some_and(|e| e.contains_key(&t.name)) =>
            {
                dtype = q;
                note = None;
            }
            // Weights imported already quantized (QAT) keep their grid unless QAT import is off
            // or a pattern asks for another type.
            Some(q) if q.is_quantized() && recipe.qat != QatMode::Off && !overridden => {
                dtype = q;
                note = None;
            }
            _ => {}
        }
        if t.stored.is_none() {
            return Err(FormatError::BadTensor {
                path: source.path().to_path_buf(),
                name: t.name.clone(),
                reason: "its dtype cannot be converted (F32, F16, BF16 only)".into(),
            });
        }
        let shape = t.shape.clone();
        plan.push((t, dtype, note, shape));
    }

    let tokenizer = source.tokenizer_json()?;
    // Level 6: within 1 % of level 9 on tokenizer.json, several times faster.
    let packed = miniz_oxide::deflate::compress_to_vec(&tokenizer, 6);
    let header = PocketHeader {
        format: "pocket".into(),
        spec: source.spec().clone(),
        generation: source.generation(),
        tokenizer: source.tokenizer_meta()?,
        recipe: serde_json::to_value(recipe).unwrap_or_default(),
        provenance: Provenance {
            writer: format!("pocket {}", env!("CARGO_PKG_VERSION")),
            source: source.path().display().to_string(),
            files: source
                .provenance_files()
                .iter()
                .map(|p| SourceFile {
                    name: p
                        .file_name()
                        .map(|n| n.to_string_lossy().to_string())
                        .unwrap_or_default(),
                    bytes: 0,
                    sha256: "0".repeat(64),
                })
                .collect(),
        },
        blobs: vec![BlobEntry {
            name: TOKENIZER_BLOB.into(),
            encoding: "deflate".into(),
            offset: 0,
            size: packed.len() as u64,
            raw_size: tokenizer.len() as u64,
            xxh3: String::new(),
        }],
        tensors: plan
            .iter()
            .map(|(t, dtype, _, shape)| TensorEntry {
                name: t.name.clone(),
                dtype: *dtype,
                shape: shape.clone(),
                offset: 0,
                size: 0,
                xxh3: String::new(),
                layout: layout_for(*dtype, shape),
            })
            .collect(),
    };
    Ok((plan, header, packed))
}

/// The bytes `write_pocket` would write for `source` with `recipe`, computed from the types
/// and shapes without encoding anything.
pub fn planned_file_bytes(source: &ModelFile, recipe: &Recipe) -> Result<u64, FormatError> {
    let tensors = source.tensors();
    let (_, header, _) = plan_file(source, &tensors, recipe, None)?;
    crate::pocket::writer::planned_bytes(header)
}

pub fn write_pocket(
    source: &ModelFile,
    recipe: &Recipe,
    importance: Option<&Importance>,
    compensation: Option<&Compensations>,
    edits: Option<&dyn Edits>,
    dest: &Path,
    progress: Progress,
) -> Result<ConvertReport, FormatError> {
    let tensors = source.tensors();
    let (plan, header, packed) = plan_file(source, &tensors, recipe, edits)?;
    let mut writer = PocketWriter::create(dest, header)?;

    // Hash the source files on a second thread while the tensors are encoded.
    let files = source.provenance_files();
    std::thread::scope(|scope| {
        let hashing = scope.spawn(|| {
            files
                .iter()
                .map(|p| sha256_file(p))
                .collect::<Result<Vec<_>, _>>()
        });
        writer.write_next(&packed)?;
        let total: u64 = plan
            .iter()
            .map(|(_, _, _, s)| s.iter().product::<usize>() as u64)
            .sum();
        let mut done = 0u64;
        let mut reports = Vec::with_capacity(plan.len());
        let mut overall = ErrorStats::default();
        for (t, dtype, note, shape) in &plan {
            let edited = edits.is_some_and(|e| e.contains_key(&t.name));
            let (bytes, report, stats) = encode_tensor(
                source,
                recipe,
                importance,
                compensation,
                edits,
                &t.name,
                if edited { None } else { t.stored },
                *dtype,
                shape,
                note.clone(),
            )?;
            let bytes = match (layout_for(*dtype, shape), &shape[..]) {
                // Stored as the kernels read it, so loading maps it without repacking.
                (Layout::Rows16, &[rows, cols]) => rows16::pack(*dtype, &bytes, rows, cols)
                    .expect("the shape fits rows16 and the encoder sized the bytes"),
                _ => bytes,
            };
            writer.write_next(&bytes)?;
            if dtype.is_quantized() {
                overall.merge(&stats);
            }
            done += shape.iter().product::<usize>() as u64;
            progress(done, total, &t.name);
            reports.push(report);
        }
        let hashes = hashing.join().map_err(|_| FormatError::Invalid {
            path: source.path().to_path_buf(),
            reason: "hashing thread panicked".into(),
        })??;
        let mut prov = writer.header().provenance.clone();
        for (f, (bytes, sha)) in prov.files.iter_mut().zip(hashes) {
            f.bytes = bytes;
            f.sha256 = sha;
        }
        writer.set_provenance(prov);
        writer.finish()?;
        let file_bytes = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
        Ok(ConvertReport {
            output: dest.display().to_string(),
            file_bytes,
            parameters: total,
            rel_rms: overall.rel_rms,
            tensors: reports,
        })
    })
}

/// Q4 and Q8 matrices whose shape allows it are stored in the kernels' 16-row layout.
fn layout_for(dtype: QuantType, shape: &[usize]) -> Layout {
    match shape {
        [rows, cols] if rows16::fits(dtype, *rows, *cols) => Layout::Rows16,
        _ => Layout::Rows,
    }
}

#[allow(clippy::too_many_arguments)]
fn encode_tensor(
    source: &ModelFile,
    recipe: &Recipe,
    importance: Option<&Importance>,
    compensation: Option<&Compensations>,
    edits: Option<&dyn Edits>,
    name: &str,
    stored: Option<QuantType>,
    dtype: QuantType,
    shape: &[usize],
    note: Option<String>,
) -> Result<(Vec<u8>, TensorReport, ErrorStats), FormatError> {
    let (rows, cols) = match shape {
        [n] => (1, *n),
        [r, c] => (*r, *c),
        _ => (1, shape.iter().product()),
    };
    let mut report = TensorReport {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        bytes: 0,
        rel_rms: 0.0,
        max_abs: 0.0,
        qat_blocks: None,
        off_grid: Vec::new(),
        note,
        carried: false,
    };
    // A tensor that keeps its stored type is copied byte for byte.
    if stored == Some(dtype) {
        if let Some(b) = source.raw_bytes(name) {
            // Dense copies are decoded for the check; a .pocket's own 4-bit blocks cannot be
            // read as f32 and were checked when that file was written.
            if let Ok(v) = source.read_f32(name) {
                crate::finite::check(source, name, &v, recipe.allow_nonfinite)?;
            }
            report.bytes = b.len() as u64;
            if let QuantType::Ggml(_) = dtype {
                report.carried = true;
                return Ok((b, report, ErrorStats::default()));
            }
            if let Some(block) = dtype.block() {
                report.qat_blocks = Some((rows * cols / block, rows * cols / block));
            }
            return Ok((b, report, ErrorStats::default()));
        }
        // Imported parameters that f16 cannot hold exactly: the values are re-gridded below,
        // block by block (exact wherever some f16 scale and zero reproduce them).
    }
    let values = edited(source, name, edits)?;
    crate::finite::check(source, name, &values, recipe.allow_nonfinite)?;
    let mut bytes = Vec::new();
    let stats = match dtype {
        QuantType::Ggml(t)
            if crate::gguf::quantize::ENCODED.contains(&t)
                && cols % t.block().0 == 0
                && shape.len() == 2 =>
        {
            let imp = importance
                .and_then(|m| m.get(name))
                .map(|v| v.as_slice())
                .filter(|v| v.len() == cols && recipe.method != Method::Rtn);
            match compensation
                .filter(|_| recipe.gptq)
                .and_then(|m| m.get(name))
            {
                Some(c) => crate::gguf::quantize::quantize_compensated(
                    t, &values, cols, imp, c, &mut bytes,
                ),
                None => crate::gguf::quantize::quantize_weighted(t, &values, cols, imp, &mut bytes),
            }
            let mut back = vec![0.0; values.len()];
            crate::gguf::ggml::dequantize(t, &bytes, &mut back);
            ErrorStats::of(&values, &back)
        }
        QuantType::Ggml(t) => {
            return Err(FormatError::BadTensor {
                path: source.path().to_path_buf(),
                name: name.into(),
                reason: if crate::gguf::quantize::ENCODED.contains(&t) {
                    format!(
                        "{} blocks hold matrices whose rows are a whole number of {} values; this is {shape:?}",
                        t.name(),
                        t.block().0
                    )
                } else {
                    format!(
                        "pocket does not encode {} blocks; they are only carried from a GGUF (it writes ggml_q8_0, ggml_q4_0, ggml_q4_1, ggml_q5_0, ggml_q5_1, ggml_iq4_nl, ggml_iq4_xs)",
                        t.name()
                    )
                },
            })
        }
        QuantType::F32 => {
            dense::encode_f32(&values, &mut bytes);
            ErrorStats::default()
        }
        QuantType::F16 | QuantType::BF16 => {
            let mut back = vec![0.0; values.len()];
            if dtype == QuantType::F16 {
                dense::encode_f16(&values, &mut bytes);
                dense::decode_f16(&bytes, &mut back);
            } else {
                dense::encode_bf16(&values, &mut bytes);
                dense::decode_bf16(&bytes, &mut back);
            }
            ErrorStats::of(&values, &back)
        }
        QuantType::Q8 { block } => {
            let comp = compensation
                .filter(|_| recipe.gptq)
                .and_then(|m| m.get(name))
                .filter(|c| c.cols == cols);
            let (b, st) = match comp {
                Some(c) => q8::quantize_compensated(&values, rows, cols, block, c),
                None => q8::quantize(&values, rows, cols, block),
            };
            bytes = b;
            st
        }
        QuantType::Q4 { block, sym } => {
            let q = q4::quantize(
                &values,
                rows,
                cols,
                q4::Options {
                    block,
                    sym,
                    method: recipe.method,
                    grid: recipe.qat != QatMode::Off,
                    importance: importance
                        .and_then(|m| m.get(name))
                        .map(|v| v.as_slice())
                        .filter(|v| v.len() == cols && recipe.method != Method::Rtn),
                    compensation: compensation
                        .filter(|_| recipe.gptq)
                        .and_then(|m| m.get(name))
                        .map(|c| &**c),
                },
            );
            let blocks = rows * cols / block;
            // Report a tensor as QAT when most of it is on a grid (a few blocks of ordinary
            // weights can happen to fit one; they are stored exactly all the same).
            if recipe.qat != QatMode::Off && q.grid_blocks * 2 >= blocks {
                report.qat_blocks = Some((q.grid_blocks, blocks));
                report.off_grid = q.off_grid.clone();
            }
            if recipe.qat == QatMode::Strict && q.grid_blocks < blocks {
                return Err(FormatError::BadTensor {
                    path: source.path().to_path_buf(),
                    name: name.into(),
                    reason: format!(
                        "--qat strict: {} of {blocks} blocks are not on a 4-bit grid (first at row/block {:?}); store tensors that were not trained for 4 bits at another type, e.g. --embed q8",
                        blocks - q.grid_blocks,
                        q.off_grid.first()
                    ),
                });
            }
            bytes = q.bytes;
            q.error
        }
    };
    report.bytes = bytes.len() as u64;
    report.rel_rms = stats.rel_rms;
    report.max_abs = stats.max_abs;
    Ok((bytes, report, stats))
}

fn sha256_file(path: &Path) -> Result<(u64, String), FormatError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).map_err(|e| FormatError::io(path, e))?;
        if k == 0 {
            break;
        }
        n += k as u64;
        h.update(&buf[..k]);
    }
    Ok((n, h.finalize().iter().map(|b| format!("{b:02x}")).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantType;

    /// The planned size is the written size, whatever the types: what `--size` relies on.
    #[test]
    fn the_planned_size_is_the_written_size() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tiny/qwen3-tiny");
        let source = ModelFile::open(&src).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mixed = Recipe {
            overrides: vec![
                ("*.layers.0.*".into(), QuantType::Q8 { block: 64 }),
                (
                    "*down_proj*".into(),
                    QuantType::Q4 {
                        block: 128,
                        sym: true,
                    },
                ),
                ("*q_proj*".into(), QuantType::F16),
            ],
            ..Recipe::default()
        };
        for (i, recipe) in [Recipe::default(), mixed].iter().enumerate() {
            let out = tmp.path().join(format!("{i}.pocket"));
            let r = write_pocket(&source, recipe, None, None, None, &out, &|_, _, _| {}).unwrap();
            assert_eq!(
                planned_file_bytes(&source, recipe).unwrap(),
                r.file_bytes,
                "recipe {i}"
            );
        }
    }
}
