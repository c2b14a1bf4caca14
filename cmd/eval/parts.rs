//! The task logs of a suite or drift run split into parts (`pocket eval suite … --shard K/N`):
//! each part writes `<log>.part-K-of-N.jsonl` under --work beside the one run's `<log>.jsonl`,
//! and the command without --shard, given a --work holding every part's logs, joins them into
//! the one run's log before it runs the task, which then finds every item done and reports
//! what one run reports (the evals crate's `shards::merge` checks the parts are one run's).

use anyhow::{bail, Context, Result};
use pocket_evals::shards::{self, Shard};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where part `shard` of the run whose one log is `whole` writes its log.
pub fn part_path(whole: &Path, shard: Shard) -> PathBuf {
    whole.with_file_name(format!(
        "{}.part-{}-of-{}.jsonl",
        stem(whole),
        shard.k,
        shard.n
    ))
}

/// The log's file name without `.jsonl`.
fn stem(whole: &Path) -> String {
    let name = whole
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".jsonl").unwrap_or(&name).to_string()
}

/// K and N of a part log's file name, if `name` is one of `stem`'s parts.
fn part_of(name: &str, stem: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix(stem)?.strip_prefix(".part-")?;
    let (k, n) = rest.strip_suffix(".jsonl")?.split_once("-of-")?;
    Some((k.parse().ok()?, n.parse().ok()?))
}

/// Joins the part logs found beside `whole` into it, when `whole` does not exist yet. Returns
/// how many parts were joined (None: nothing to join, or `whole` is already there, in which
/// case the run resumes from it and the parts are left alone).
pub fn join(whole: &Path) -> Result<Option<usize>> {
    if whole.exists() {
        return Ok(None);
    }
    let dir = whole.parent().unwrap_or(Path::new("."));
    let stem = stem(whole);
    // Part logs by their N, then K.
    let mut found: BTreeMap<usize, BTreeMap<usize, PathBuf>> = BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(_) => return Ok(None),
    };
    for e in entries {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some((k, n)) = part_of(&name, &stem) {
            found.entry(n).or_default().insert(k, e.path());
        }
    }
    let Some((&n, parts)) = found.iter().next() else {
        return Ok(None);
    };
    if found.len() > 1 {
        let splits: Vec<String> = found.keys().map(|n| format!("{n} parts")).collect();
        bail!(
            "{}: part logs of runs split {} ways ({}) beside it; keep one run's parts",
            whole.display(),
            splits.len(),
            splits.join(", ")
        );
    }
    let mut files = Vec::with_capacity(parts.len());
    for path in parts.values() {
        let logged = pocket_evals::runlog::read(path)?;
        // A part that owns no item (a task with fewer items than parts) logs nothing; a part
        // that should have logged and did not is named by the merge.
        if !logged.is_empty() {
            files.push((path.clone(), logged));
        }
    }
    let merged = shards::merge(&files).with_context(|| {
        format!(
            "joining the {n}-part logs of {} (every part's logs must be in {})",
            stem,
            dir.display()
        )
    })?;
    write_log(whole, &merged.records)?;
    Ok(Some(n))
}

/// A one run's log of `records` at `path`, written whole or not at all.
pub fn write_log(path: &Path, records: &[Map<String, Value>]) -> Result<()> {
    let mut bytes = Vec::new();
    for r in records {
        serde_json::to_writer(&mut bytes, r)?;
        bytes.push(b'\n');
    }
    pocket_formats::atomic::write_atomic(path, &bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_round_trip() {
        let whole = Path::new("w/gsm8k_cot.1.m.gguf.jsonl");
        let p = part_path(whole, Shard { k: 2, n: 3 });
        assert_eq!(p, Path::new("w/gsm8k_cot.1.m.gguf.part-2-of-3.jsonl"));
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(part_of(name, &stem(whole)), Some((2, 3)));
        assert_eq!(part_of(name, "gsm8k_cot.2.m.gguf"), None);
        assert_eq!(part_of("gsm8k_cot.1.m.gguf.jsonl", &stem(whole)), None);
    }
}
