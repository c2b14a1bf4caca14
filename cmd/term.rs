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
/// and pocket's kernel pool. More threads than the machine runs at once only slows pocket down
/// (its workers spin while they wait), so such a count is lowered to the CPU count with a note.
pub fn set_threads(threads: Option<u32>) -> anyhow::Result<()> {
    use anyhow::Context;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = match threads.map(|t| t as usize) {
        Some(asked) if asked > cpus => {
            eprintln!(
                "(--threads {asked}: this machine runs {cpus} thread{} at once; using {cpus})",
                if cpus == 1 { "" } else { "s" }
            );
            cpus
        }
        Some(asked) => asked,
        None => pocket::pool::default_threads(),
    }
    .max(1);
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    // Only a count the user asked for must take effect; the default may find rayon started.
    if threads.is_some() {
        built.context("starting the thread pool")?;
    }
    pocket::pool::init(n, crate::settings::bands_on_rayon());
    Ok(())
}
