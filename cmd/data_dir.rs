//! Where the eval data sets are: one rule for every `pocket eval` default, so a command run
//! outside the checkout finds what `scripts/fetch-eval-data.sh` fetched.
//!
//! In order: `$POCKET_DATA`; `./data` when the current directory has one (a checkout); the
//! `data/` of the checkout this binary was built from, when it is still there (what the fetch
//! script writes by default); else the per-user cache, `$XDG_CACHE_HOME/pocket/data` or
//! `~/.cache/pocket/data` (`POCKET_DATA=… scripts/fetch-eval-data.sh` fills any of them).

use std::path::{Path, PathBuf};

/// The data directory, by the rule above (it may not exist yet).
pub fn data_root() -> PathBuf {
    if let Some(d) = std::env::var_os("POCKET_DATA").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let here = PathBuf::from("data");
    if here.is_dir() {
        return here;
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data");
    if built.is_dir() {
        return built.canonicalize().unwrap_or(built);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    match cache {
        Some(c) => c.join("pocket/data"),
        None => here,
    }
}

/// A file or directory under [`data_root`].
pub fn data_path(rel: &str) -> PathBuf {
    data_root().join(rel)
}
