//! The prefill progress bar of a long prompt: a 16K-token document takes tens of seconds to
//! read before the first answer token, and a silent terminal looks hung.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Prompts shorter than this finish in about a second: no bar.
const MIN_TOKENS: usize = 2048;

/// A prefill hook (`State::on_prefill`) drawing a bar on stderr, or `None` when stderr is not
/// a terminal or `quiet`. The bar appears only for prompts of [`MIN_TOKENS`] or more and is
/// cleared when the prompt is done, before the answer streams.
pub fn prefill_bar(quiet: bool) -> Option<Box<dyn FnMut(usize, usize) + Send>> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let mut bar: Option<ProgressBar> = None;
    Some(Box::new(move |done, total| {
        if total < MIN_TOKENS {
            return;
        }
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(total as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "reading the prompt {bar:40} {pos}/{len} tokens, {per_sec}, {eta} left",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        });
        b.set_length(total as u64);
        b.set_position(done as u64);
        if done >= total {
            b.finish_and_clear();
            bar = None;
        }
    }))
}
