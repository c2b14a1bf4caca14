//! AVX2 + FMA + F16C kernels (int8 dot products through `vpmaddubsw`).

pub(crate) mod act;
pub(crate) mod attn;
pub(crate) mod gate;
pub(crate) mod lora;
pub(crate) mod q4;
pub(crate) mod q4p;
pub(crate) mod q4p_f32;
pub(crate) mod q8;
pub(crate) mod q8p;
pub(crate) mod q8p_f32;

use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};

/// Passes over at most this many activation rows (a token's one or two digits each) ask for
/// the next group's records ahead: a decode step, a verification pass, a batch, which read
/// the weights from memory once (the engine's decode route takes up to 16 tokens). Prefill's
/// larger passes work from the cache; there it measured slower on SmolLM2 (int8x2 prefill
/// 313 against 352 tok/s, medians of 8) and faster on the MNN-Pocket shape (183 against 169).
pub(super) const STREAM_ROWS: usize = 16;

/// Asks for the record `ahead` bytes past `r` (the same block of the next 16-row group, which
/// this thread's band reads next) while this one computes. A packed kernel on AVX2 does
/// enough arithmetic per byte that the hardware's stream prefetch alone leaves a core reading
/// memory well below what it can: on an AVX2-only EPYC (Zen 3), with it the default decode of the
/// MNN-Pocket shape went from 78.5 to 91.1 tok/s and of Qwen2.5-Coder Q4_K_M from 40.5 to
/// 42.4 (medians, docs/runs/performance.md, 2026-12-07 night). Called once per record of a
/// group (its first pass over the group: the later passes find it in cache), and only in
/// passes of up to [`STREAM_ROWS`] rows. A prefetch never faults, and the address is only
/// computed (`wrapping_add`), never read, past the matrix's end.
#[inline(always)]
pub(super) fn prefetch_record(r: *const u8, ahead: usize, rec: usize) {
    let next = r.wrapping_add(ahead);
    for line in (0..rec).step_by(64) {
        // SAFETY: a prefetch is a hint (SSE, every x86-64): it reads nothing into the
        // program and cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8) };
    }
}
