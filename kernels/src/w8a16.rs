//! Packed Q8 rows against f32 activations, one token: the exact path's (`--activations f32`)
//! mat-vec for Q8 weights, which are most of a GGUF's output head (Qwen2.5-Coder's 146 MB
//! Q8_0 head, Gemma 3's). Its definition is the reference every matrix falls back to: the
//! row decoded to f32 (`PackedQ8::row`: `(q as i8) as f32 · scale`) and [`scalar::dot`]'s
//! eight running sums. The SIMD version (`x86/avx2/q8p_f32.rs`) keeps that order and
//! rounding, so it gives the same bits and a model's logits do not move; it only skips the
//! decoded row (with it, the head alone took most of a 5 tok/s decode on Qwen, AVX2). The
//! NEON version (`aarch64/q8p_f32.rs`) is the same loop on every aarch64 level.
//!
//! [`scalar::dot`]: super::scalar::dot

use super::q8_packed::{PackedQ8, GROUP};
use super::Cpu;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::Isa;

/// `out[i] = row(first + i) · x` for `count` rows from `first` (both multiples of 16), bit
/// for bit [`dot_rows_f32_scalar`] on every ISA.
pub fn dot_rows_f32(
    cpu: Cpu,
    p: &PackedQ8,
    first: usize,
    count: usize,
    x: &[f32],
    out: &mut [f32],
) {
    assert!(first % GROUP == 0 && count % GROUP == 0 && first + count <= p.rows);
    assert!(out.len() == count && x.len() == p.cols && p.block % 8 == 0);
    assert!(p.data.len() == p.rows / GROUP * p.blocks() * p.record());
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 | Isa::Amx => {
            // SAFETY: the CPU has AVX2 and F16C (the `Cpu` token proves it; every x86 level
            // above scalar has them); the layout, the rows, `x` and `out` were checked above.
            unsafe { super::x86::avx2::q8p_f32::dot_rows(p, first, count, x, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => {
            // SAFETY: every aarch64 level has NEON; the layout, the rows, `x` and `out` were
            // checked above.
            unsafe { super::aarch64::q8p_f32::dot_rows(p, first, count, x, out) }
        }
        _ => dot_rows_f32_scalar(p, first, count, x, out),
    }
}

/// The scalar twin of [`dot_rows_f32`], and its definition: each row decoded, then
/// [`super::scalar::dot`].
pub fn dot_rows_f32_scalar(p: &PackedQ8, first: usize, count: usize, x: &[f32], out: &mut [f32]) {
    let mut row = vec![0.0f32; p.cols];
    for (i, o) in out.iter_mut().enumerate().take(count) {
        p.row(first + i, &mut row);
        *o = super::scalar::dot(&row, x);
    }
}
