//! Terminal detection and styling. Colours only when the stream is a terminal and NO_COLOR is
//! unset, so scripts and CI logs get plain text.

use std::io::IsTerminal;

pub fn stderr_styled() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Dim text for secondary information such as the stats line.
pub fn dim(text: &str, styled: bool) -> String {
    if styled {
        format!("\x1b[2m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// 134515008 → "134,515,008".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `--threads N` (default: one per physical core): sizes rayon's pool (prefill, batched work)
/// and pocket's kernel pool.
pub fn set_threads(threads: Option<usize>) -> anyhow::Result<()> {
    use anyhow::Context;
    let n = threads
        .unwrap_or_else(pocket::kernels::pool::default_threads)
        .max(1);
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    // Only a count the user asked for must take effect; the default may find rayon started.
    if threads.is_some() {
        built.context("starting the thread pool")?;
    }
    pocket::kernels::pool::init(n);
    Ok(())
}
