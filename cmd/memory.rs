//! Whether a context fits in memory, checked before its KV cache is made: a phone app (or a
//! laptop planning for one) learns at start-up, with the figures, instead of being killed by
//! the OOM killer thousands of tokens into a long prompt.
//!
//! Available memory is the least of the kernel's `MemAvailable`, the cgroup's limit minus its
//! anonymous memory (containers, Android's app limits; page cache is reclaimable), and
//! `POCKET_MEM_LIMIT` (bytes, or with a K/M/G suffix) minus what the process already holds: a
//! budget to plan against.

use anyhow::{bail, Result};
use pocket::model::Model;

/// What the process needs beyond the cache: activations, logits, the tokenizer's buffers.
const HEADROOM: usize = 100 << 20;

/// The context to use: `asked` (an explicit `--ctx`) is refused when its cache would not fit;
/// the default (the model's maximum) is lowered to what fits, with a note.
/// `what` names the flag asking (`--ctx`, `--depth`).
pub fn fit_context(
    model: &Model,
    what: &str,
    asked: Option<usize>,
    default: usize,
    quiet: bool,
) -> Result<usize> {
    fit_context_slots(model, what, asked, default, quiet, 1, 0)
}

/// [`fit_context`] for `slots` caches of the context each (a server's parallel slots), with
/// `reserved` bytes more set aside (a server's prompt cache).
pub fn fit_context_slots(
    model: &Model,
    what: &str,
    asked: Option<usize>,
    default: usize,
    quiet: bool,
    slots: usize,
    reserved: usize,
) -> Result<usize> {
    let headroom = HEADROOM + reserved;
    let slots = slots.max(1);
    let ctx = asked.unwrap_or(default);
    let Some((avail, source)) = available()? else {
        return Ok(ctx);
    };
    let kv = model.config.kv;
    let need = slots * model.kv_bytes(ctx, kv) + headroom;
    if need <= avail {
        return Ok(ctx);
    }
    let mb = |b: usize| b as f64 / 1e6;
    // The most positions (a multiple of 256) whose cache fits: the cache grows with the
    // context, so a binary search over it.
    let budget = avail.saturating_sub(headroom);
    let (mut lo, mut hi) = (0usize, ctx / 256);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if slots * model.kv_bytes(mid * 256, kv) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let fits = lo * 256;
    if asked.is_some() || fits == 0 {
        bail!(
            "{what} {ctx} needs a {:.1} MB KV cache ({}{}) and {:.0} MB working memory; {:.1} MB \
             is available ({source}); about {fits} positions fit{}",
            mb(slots * model.kv_bytes(ctx, kv)),
            kv.name(),
            if slots > 1 {
                format!(" for {slots} slots")
            } else {
                String::new()
            },
            mb(headroom),
            mb(avail),
            if matches!(
                kv,
                pocket::config::KvPrecision::Q8 | pocket::config::KvPrecision::Q4
            ) {
                ""
            } else {
                ", or twice as many with --kv q8"
            }
        );
    }
    if !quiet {
        eprintln!(
            "note: a {ctx}-position context needs a {:.0} MB KV cache ({}{}); {:.0} MB is \
             available ({source}), so the context is {fits} positions (--ctx to choose)",
            mb(slots * model.kv_bytes(ctx, kv)),
            kv.name(),
            if slots > 1 {
                format!(" for {slots} slots")
            } else {
                String::new()
            },
            mb(avail)
        );
    }
    Ok(fits)
}

/// The memory this process may still take, and where the figure comes from; `None` when
/// nothing says (not Linux).
fn available() -> Result<Option<(usize, &'static str)>> {
    let mut best: Option<(usize, &'static str)> = None;
    let mut take = |b: usize, src: &'static str| {
        if best.is_none_or(|(a, _)| b < a) {
            best = Some((b, src));
        }
    };
    if let Some(kb) = meminfo_kb("MemAvailable:") {
        take(kb * 1024, "MemAvailable in /proc/meminfo");
    }
    if let Some(b) = cgroup_headroom() {
        take(b, "the cgroup's memory.max");
    }
    if let Some(v) = std::env::var("POCKET_MEM_LIMIT")
        .ok()
        .filter(|v| !v.is_empty())
    {
        let limit = parse_bytes(&v).ok_or_else(|| {
            anyhow::anyhow!("POCKET_MEM_LIMIT={v}: expected bytes, optionally with K, M or G")
        })?;
        let rss = status_kb("VmRSS:").unwrap_or(0) * 1024;
        take(
            limit.saturating_sub(rss),
            "POCKET_MEM_LIMIT less this process's resident memory",
        );
    }
    Ok(best)
}

/// The process's cgroup (v2) limit less its anonymous memory: page cache (the mapped model
/// file among it) is reclaimable, so `memory.current` would count it against the limit.
fn cgroup_headroom() -> Option<usize> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let max: usize = std::fs::read_to_string(dir.join("memory.max"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
    let anon: usize = stat
        .lines()
        .find_map(|l| l.strip_prefix("anon "))?
        .trim()
        .parse()
        .ok()?;
    Some(max.saturating_sub(anon))
}

fn parse_bytes(v: &str) -> Option<usize> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1usize << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mult)
}

fn meminfo_kb(key: &str) -> Option<usize> {
    field_kb("/proc/meminfo", key)
}

fn status_kb(key: &str) -> Option<usize> {
    field_kb("/proc/self/status", key)
}

fn field_kb(path: &str, key: &str) -> Option<usize> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_sizes_parse() {
        assert_eq!(super::parse_bytes("3G"), Some(3 << 30));
        assert_eq!(super::parse_bytes("512M"), Some(512 << 20));
        assert_eq!(super::parse_bytes("1000"), Some(1000));
        assert_eq!(super::parse_bytes("lots"), None);
        assert_eq!(super::parse_bytes("99999999999999999999G"), None);
    }
}
