//! Hostile results logs as `pocket eval merge` reads them: each part's log parsed line by
//! line, then the parts joined (identity, part and index checks, the report). Errors are fine;
//! panics, hangs and allocations sized by a count in the file are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
extern crate pocket_fuzz;
use pocket_evals::{runlog, shards};
use pocket_fuzz::inputs::split_logs;
use std::path::PathBuf;

fuzz_target!(|data: &[u8]| {
    let mut files = Vec::new();
    for (i, bytes) in split_logs(data).into_iter().enumerate() {
        let path = PathBuf::from(format!("part{i}.jsonl"));
        let Ok(records) = runlog::records(bytes, &path) else {
            return;
        };
        files.push((path, records));
    }
    let _ = shards::merge(&files);
});
