//! Where the model's tensors come from: each file kind's tensors by HF name, checked against
//! the shape the model expects, as [`Matrix`] values.

use super::Matrix;
use crate::config::EngineConfig;
use crate::Error;
use pocket_formats::gguf::GgufFile;
use pocket_formats::hf::{DType, HfCheckpoint, MappedTensor};
use pocket_formats::pocket::reader::{PocketFile, PocketTensor};
use pocket_formats::quant::QuantType;

/// Where the model's tensors come from.
pub trait WeightSource {
    /// The file named in errors.
    fn describe(&self) -> String;
    fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        config: EngineConfig,
    ) -> Result<Matrix, Error>;
    /// A small vector (norm weight, bias) read fully into memory.
    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error>;
}

fn shape_error(name: &str, got: &[usize], want: &[usize]) -> Error {
    Error::Invalid(format!(
        "tensor `{name}` has shape {got:?}, expected {want:?}"
    ))
}

fn hf_dtype(t: &MappedTensor) -> Result<QuantType, Error> {
    match t.dtype {
        DType::F32 => Ok(QuantType::F32),
        DType::F16 => Ok(QuantType::F16),
        DType::BF16 => Ok(QuantType::BF16),
        DType::Other(ref d) => Err(Error::Unsupported(format!(
            "tensor `{}` has dtype {d}; weights must be F32, F16 or BF16",
            t.name
        ))),
    }
}

impl WeightSource for HfCheckpoint {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        let t = self.tensor(name)?;
        if t.shape != [rows, cols] {
            return Err(shape_error(name, &t.shape, &[rows, cols]));
        }
        Matrix::new(name, rows, cols, hf_dtype(t)?, t.view().clone(), config)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error> {
        let t = self.tensor(name)?;
        if t.shape != [len] {
            return Err(shape_error(name, &t.shape, &[len]));
        }
        hf_dtype(t)?;
        Ok(t.to_f32_vec().expect("dtype checked"))
    }
}

impl WeightSource for PocketFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        let t = pocket_tensor(self, name)?;
        if t.entry.shape != [rows, cols] {
            return Err(shape_error(name, &t.entry.shape, &[rows, cols]));
        }
        Matrix::from_pocket(
            name,
            rows,
            cols,
            t.entry.dtype,
            t.entry.layout,
            t.data,
            config,
        )
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error> {
        let t = pocket_tensor(self, name)?;
        if t.entry.shape != [len] {
            return Err(shape_error(name, &t.entry.shape, &[len]));
        }
        let m = Matrix::new(name, 1, len, t.entry.dtype, t.data, EngineConfig::fast())?;
        let mut out = vec![0.0; len];
        m.row(0, &mut out);
        Ok(out)
    }
}

fn pocket_tensor(f: &PocketFile, name: &str) -> Result<PocketTensor, Error> {
    f.tensor(name).ok_or_else(|| {
        pocket_formats::FormatError::MissingTensor {
            path: f.path.clone(),
            name: name.into(),
        }
        .into()
    })
}

impl WeightSource for GgufFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        config: EngineConfig,
    ) -> Result<Matrix, Error> {
        let t = gguf_tensor(self, name)?;
        if t.dims != [cols as u64, rows as u64] {
            return Err(shape_error(
                name,
                &t.dims.iter().rev().map(|&d| d as usize).collect::<Vec<_>>(),
                &[rows, cols],
            ));
        }
        Matrix::ggml(
            name,
            rows,
            cols,
            t.ty,
            t.data.clone(),
            self.llama_row_map(name, rows),
            config,
        )
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, Error> {
        let t = gguf_tensor(self, name)?;
        if t.dims != [len as u64] {
            return Err(shape_error(
                name,
                &t.dims.iter().map(|&d| d as usize).collect::<Vec<_>>(),
                &[len],
            ));
        }
        let m = Matrix::ggml(
            name,
            1,
            len,
            t.ty,
            t.data.clone(),
            None,
            EngineConfig::fast(),
        )?;
        let mut v = vec![0.0; len];
        m.row(0, &mut v);
        if let Some(fam) = pocket_formats::gguf::model::family(self) {
            let shift = pocket_formats::gguf::model::norm_shift(fam, name);
            v.iter_mut().for_each(|x| *x += shift);
        }
        if let Some(map) = self.llama_row_map(name, len) {
            v = map.iter().map(|&i| v[i as usize]).collect();
        }
        Ok(v)
    }
}

trait LlamaLayout {
    fn llama_row_map(&self, hf_name: &str, rows: usize) -> Option<Vec<u32>>;
}

impl LlamaLayout for GgufFile {
    /// llama.cpp's converter interleaves the rows of each q/k head for `llama` models.
    fn llama_row_map(&self, hf_name: &str, rows: usize) -> Option<Vec<u32>> {
        if self.architecture() != Some("llama")
            || !(hf_name.contains("self_attn.q_proj") || hf_name.contains("self_attn.k_proj"))
        {
            return None;
        }
        let spec = pocket_formats::gguf::model::spec(self).ok()?;
        Some(
            (0..rows)
                .map(|r| pocket_formats::gguf::model::llama_qk_row(r, spec.head_dim) as u32)
                .collect(),
        )
    }
}

fn gguf_tensor<'a>(
    f: &'a GgufFile,
    hf: &str,
) -> Result<&'a pocket_formats::gguf::GgufTensor, Error> {
    use pocket_formats::gguf::model::{family, gguf_name};
    let g = family(f).and_then(|fam| gguf_name(hf, fam));
    g.as_deref().and_then(|g| f.tensor(g)).ok_or_else(|| {
        pocket_formats::FormatError::MissingTensor {
            path: f.path.clone(),
            name: g.unwrap_or_else(|| hf.into()),
        }
        .into()
    })
}
