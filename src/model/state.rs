//! Per-conversation decoding state: the KV cache, and the buffers a decode step's head writes.

use crate::kv_cache::KvCache;
use crate::Error;

pub struct State {
    pub cache: KvCache,
    /// The last row's normed hidden state (the head's input).
    pub(super) xn: Vec<f32>,
    /// The last row's logits, when the pass asked for them.
    pub(super) logits: Vec<f32>,
    /// Called after each chunk of a prompt's prefill with (tokens done, tokens in the prompt):
    /// a terminal's progress bar on a long prompt (the library draws nothing itself).
    pub on_prefill: Option<Box<dyn FnMut(usize, usize) + Send>>,
    /// The LoRA adapters this sequence runs with (none: the base).
    pub lora: Option<std::sync::Arc<crate::lora::AdapterSet>>,
}

impl State {
    pub(super) fn new(cache: KvCache, hidden: usize, vocab: usize) -> State {
        State {
            cache,
            xn: vec![0.0; hidden],
            logits: vec![0.0; vocab],
            on_prefill: None,
            lora: None,
        }
    }

    /// Refuses `n` more positions when they do not fit.
    pub(super) fn check_room(&self, n: usize) -> Result<(), Error> {
        if self.cache.len() + n > self.cache.capacity() {
            return Err(Error::Invalid(format!(
                "context is full ({} positions)",
                self.cache.capacity()
            )));
        }
        Ok(())
    }
}

/// A batch's activations (megabytes per layer, allocated and freed layer after layer) come from
/// glibc's heap and are reused, instead of each being a fresh `mmap` whose pages fault in and
/// are zeroed again (measured: 8–10 % of prefill). glibc serves blocks above its mmap threshold
/// (128 KiB) with `mmap` until one such block is freed, and then raises the threshold to that
/// block's size if it is at most 32 MiB: so one untouched 31 MiB block (with its header still
/// under the limit) is allocated and freed. Other allocators ignore this; nothing is touched.
pub(super) fn keep_large_buffers_on_the_heap() {
    drop(std::hint::black_box(Vec::<u8>::with_capacity(31 << 20)));
}
