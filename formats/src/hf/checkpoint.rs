//! A Hugging Face checkpoint directory: `config.json`, `generation_config.json` (optional) and
//! the weights, either one `model.safetensors` or shards listed in
//! `model.safetensors.index.json`.

use super::config::{GenerationConfig, ModelSpec};
use super::json::read_json;
use super::safetensors::{MappedTensor, SafetensorsFile};
use crate::FormatError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const CONFIG: &str = "config.json";
pub const GENERATION_CONFIG: &str = "generation_config.json";
pub const SINGLE_WEIGHTS: &str = "model.safetensors";
pub const SHARD_INDEX: &str = "model.safetensors.index.json";

pub struct HfCheckpoint {
    pub dir: PathBuf,
    pub spec: ModelSpec,
    /// `config.json` as written, for `inspect`.
    pub raw_config: serde_json::Value,
    pub generation: Option<GenerationConfig>,
    /// The safetensors files the weights came from, in load order.
    pub weight_files: Vec<PathBuf>,
    tensors: BTreeMap<String, MappedTensor>,
    /// Which file each tensor came from (index into `weight_files`).
    origin: BTreeMap<String, usize>,
}

impl HfCheckpoint {
    /// True when `dir` looks like an HF checkpoint (has a `config.json`).
    pub fn is_checkpoint_dir(dir: &Path) -> bool {
        dir.is_dir() && dir.join(CONFIG).is_file()
    }

    pub fn open(dir: &Path) -> Result<HfCheckpoint, FormatError> {
        if !dir.is_dir() {
            return Err(FormatError::Invalid {
                path: dir.to_path_buf(),
                reason: "not a directory (expected an HF checkpoint with config.json)".into(),
            });
        }
        let config_path = dir.join(CONFIG);
        let raw_config = read_json(&config_path)?;
        let spec = ModelSpec::from_json(&config_path, &raw_config)?;
        let gen_path = dir.join(GENERATION_CONFIG);
        let generation = if gen_path.is_file() {
            Some(GenerationConfig::from_file(&gen_path)?)
        } else {
            None
        };

        let (weight_files, expected) = weight_files(dir)?;
        let mut tensors = BTreeMap::new();
        let mut origin = BTreeMap::new();
        for (i, file) in weight_files.iter().enumerate() {
            let st = SafetensorsFile::open(file)?;
            for (name, t) in st.tensors {
                if tensors.contains_key(&name) {
                    return Err(FormatError::BadTensor {
                        path: file.clone(),
                        name,
                        reason: "appears in more than one shard".into(),
                    });
                }
                origin.insert(name.clone(), i);
                tensors.insert(name, t);
            }
        }
        // Every tensor the index promises must be in the shard it names.
        for (name, file) in expected {
            match origin.get(&name) {
                Some(&i) if weight_files[i] == file => {}
                _ => return Err(FormatError::MissingTensor { path: file, name }),
            }
        }
        Ok(HfCheckpoint {
            dir: dir.to_path_buf(),
            spec,
            raw_config,
            generation,
            weight_files,
            tensors,
            origin,
        })
    }

    pub fn get(&self, name: &str) -> Option<&MappedTensor> {
        self.tensors.get(name)
    }

    /// The tensor, or an error naming the weight file(s) that should have held it.
    pub fn tensor(&self, name: &str) -> Result<&MappedTensor, FormatError> {
        self.tensors
            .get(name)
            .ok_or_else(|| FormatError::MissingTensor {
                path: match self.weight_files.as_slice() {
                    [one] => one.clone(),
                    _ => self.dir.join(SHARD_INDEX),
                },
                name: name.to_string(),
            })
    }

    /// The file a tensor was read from.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.origin
            .get(name)
            .map(|&i| self.weight_files[i].as_path())
    }

    pub fn tensors(&self) -> impl Iterator<Item = &MappedTensor> {
        self.tensors.values()
    }

    /// Total number of stored elements (a tied head is stored once, so counted once).
    pub fn parameter_count(&self) -> u64 {
        self.tensors.values().map(|t| t.numel() as u64).sum()
    }
}

type ExpectedTensors = Vec<(String, PathBuf)>;

/// The weight files, and for a sharded checkpoint which tensor each shard must hold.
fn weight_files(dir: &Path) -> Result<(Vec<PathBuf>, ExpectedTensors), FormatError> {
    let index_path = dir.join(SHARD_INDEX);
    if index_path.is_file() {
        let index = read_json(&index_path)?;
        let map = index
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| FormatError::MissingField {
                path: index_path.clone(),
                field: "weight_map".into(),
            })?;
        let mut files = BTreeSet::new();
        let mut expected = Vec::new();
        for (name, file) in map {
            let file = file.as_str().ok_or_else(|| FormatError::InvalidField {
                path: index_path.clone(),
                field: format!("weight_map.{name}"),
                reason: "expected a file name".into(),
            })?;
            // A shard name is a plain file in this directory: never a path that escapes it.
            let plain = Path::new(file)
                .file_name()
                .map(|n| n == std::ffi::OsStr::new(file));
            if plain != Some(true) || file == ".." || file == "." {
                return Err(FormatError::InvalidField {
                    path: index_path.clone(),
                    field: format!("weight_map.{name}"),
                    reason: format!(
                        "`{file}` is not a plain file name in the checkpoint directory"
                    ),
                });
            }
            files.insert(file.to_string());
            expected.push((name.clone(), dir.join(file)));
        }
        if files.is_empty() {
            return Err(FormatError::Invalid {
                path: index_path,
                reason: "weight_map is empty".into(),
            });
        }
        return Ok((files.into_iter().map(|f| dir.join(f)).collect(), expected));
    }
    let single = dir.join(SINGLE_WEIGHTS);
    if single.is_file() {
        return Ok((vec![single], Vec::new()));
    }
    Err(FormatError::Invalid {
        path: dir.to_path_buf(),
        reason: format!("no {SINGLE_WEIGHTS} or {SHARD_INDEX} in the checkpoint directory"),
    })
}
