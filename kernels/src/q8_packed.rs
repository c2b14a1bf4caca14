//! Q8 weights in the SIMD kernels' layout, as Q4 is (see `q4_packed`; `rows16` in `.pocket`
//! version 2 files, repacked at load otherwise): 16
//! rows interleaved, lane k of each 64-byte vector holding 4 consecutive codes of row
//! `16g + k`. Codes are stored offset by 128 (`q ^ 0x80`), the unsigned operand `vpdpbusd`
//! needs, so the kernel does no per-vector fix-up; `128·Σx` is taken back once per block
//! (the AVX2 kernel flips the codes back to signed instead, see `x86/avx2/q8p.rs`).
//!
//! Layout: for each group of 16 rows and each block, `block/4` vectors of 64 bytes (vector
//! `i`, lane `k` = codes `4i..4i+4` of that block of row `16g + k`), then the 16 rows' f16
//! scales. Same bytes as the row-major form. Activations are read in natural order.

use super::act::QuantActs;
use super::interleave::{interleave, PackedBytes};
use super::q8::Q8Matrix;
use super::{Cpu, Isa};
use half::f16;
use pocket_formats::quant::{rows16, QuantType};

pub use super::interleave::GROUP;

/// A Q8 matrix in the 16-row interleaved layout, codes offset by 128.
pub struct PackedQ8 {
    pub data: PackedBytes,
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
}

impl PackedQ8 {
    /// Repacks `w`; `None` unless rows are a multiple of 16 and the block of 64.
    pub fn pack(w: &Q8Matrix) -> Option<PackedQ8> {
        if !rows16::fits(QuantType::Q8 { block: w.block }, w.rows, w.cols) {
            return None;
        }
        let p = PackedQ8 {
            data: PackedBytes::Owned(Vec::new()),
            rows: w.rows,
            cols: w.cols,
            block: w.block,
        };
        let (nb, dw, rec) = (p.blocks(), p.block / 4, p.record());
        debug_assert_eq!(dw * 4, p.block);
        let mut data = PackedBytes::zeroed(p.rows / GROUP * nb * rec);
        use rayon::prelude::*;
        let cpu = super::Cpu::detect(); // packing gives the same bytes on every ISA
        data.as_mut_slice()
            .par_chunks_exact_mut(nb * rec)
            .enumerate()
            .for_each(|(g, grp)| {
                for (b, rec) in grp.chunks_exact_mut(rec).enumerate() {
                    let src = &w.codes[g * GROUP * w.cols + b * w.block..];
                    interleave(cpu, src, w.cols, dw, rec, 0x8080_8080);
                    for k in 0..GROUP {
                        let r = g * GROUP + k;
                        let s = &w.scales[(r * nb + b) * 2..][..2];
                        rec[dw * 64 + k * 2..][..2].copy_from_slice(s);
                    }
                }
            });
        Some(PackedQ8 { data, ..p })
    }

    /// Packs a matrix given row by row: `unpack(r, codes, scales)` fills logical row `r`'s
    /// `cols` signed codes and its per-block f16 scale bytes (a GGUF's Q8_0 is this form with
    /// blocks of 32, which `.pocket` files do not use). `None` unless rows are a multiple of
    /// 16 and the block of 32.
    pub fn from_codes(
        rows: usize,
        cols: usize,
        block: usize,
        unpack: impl Fn(usize, &mut [u8], &mut [u8]) + Sync,
    ) -> Option<PackedQ8> {
        if !rows.is_multiple_of(GROUP)
            || block == 0
            || !block.is_multiple_of(32)
            || !cols.is_multiple_of(block)
        {
            return None;
        }
        let p = PackedQ8 {
            data: PackedBytes::Owned(Vec::new()),
            rows,
            cols,
            block,
        };
        let (nb, dw, rec) = (p.blocks(), block / 4, p.record());
        let mut data = PackedBytes::zeroed(rows / GROUP * nb * rec);
        use rayon::prelude::*;
        let cpu = super::Cpu::detect(); // packing gives the same bytes on every ISA
        data.as_mut_slice()
            .par_chunks_exact_mut(nb * rec)
            .enumerate()
            .for_each(|(g, grp)| {
                let (mut codes, mut scales) = (vec![0u8; GROUP * cols], vec![0u8; GROUP * nb * 2]);
                for k in 0..GROUP {
                    unpack(
                        g * GROUP + k,
                        &mut codes[k * cols..][..cols],
                        &mut scales[k * nb * 2..][..nb * 2],
                    );
                }
                for (b, rec) in grp.chunks_exact_mut(rec).enumerate() {
                    interleave(cpu, &codes[b * block..], cols, dw, rec, 0x8080_8080);
                    for k in 0..GROUP {
                        rec[dw * 64 + k * 2..][..2]
                            .copy_from_slice(&scales[(k * nb + b) * 2..][..2]);
                    }
                }
            });
        Some(PackedQ8 { data, ..p })
    }

    /// A matrix stored in this layout (a `.pocket` tensor in `rows16`), used in place.
    pub fn mapped(
        data: pocket_formats::bytes::ByteView,
        rows: usize,
        cols: usize,
        block: usize,
    ) -> Option<PackedQ8> {
        let data = PackedBytes::mapped(data, QuantType::Q8 { block }, rows, cols)?;
        Some(PackedQ8 {
            data,
            rows,
            cols,
            block,
        })
    }

    pub fn blocks(&self) -> usize {
        self.cols / self.block
    }

    /// Bytes of one (group, block) record.
    pub fn record(&self) -> usize {
        self.block / 4 * 64 + 32
    }

    fn record_of(&self, r: usize, b: usize) -> &[u8] {
        &self.data[((r / GROUP) * self.blocks() + b) * self.record()..][..self.record()]
    }

    /// Row `r` decoded to f32 through the codec's own decoder (bit for bit the stored form).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols);
        let (nb, dw, k) = (self.blocks(), self.block / 4, r % GROUP);
        let mut codes = vec![0u8; self.cols];
        let mut scales = vec![0u8; nb * 2];
        for b in 0..nb {
            let rec = self.record_of(r, b);
            for i in 0..dw {
                for j in 0..4 {
                    codes[b * self.block + i * 4 + j] = rec[i * 64 + k * 4 + j] ^ 0x80;
                }
            }
            scales[b * 2..][..2].copy_from_slice(&rec[dw * 64 + k * 2..][..2]);
        }
        pocket_formats::quant::q8::dequantize_row(&codes, &scales, self.block, out);
    }
}

/// `out[t·count + i] = row(first + i) · x_t` with `first` and `count` multiples of 16 and
/// every `acts[t]` quantized in the matrix's block.
pub fn dot_rows_tokens(
    cpu: Cpu,
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    assert!(first % GROUP == 0 && count % GROUP == 0 && first + count <= p.rows);
    assert!(
        out.len() == acts.len() * count && p.data.len() == p.rows / GROUP * p.blocks() * p.record()
    );
    assert!(acts.iter().all(|a| a.cols == p.cols && a.block == p.block));
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Amx
            if acts.len() >= super::x86::amx::q8p::MIN_TOKENS
                && (p.block == 32 || p.block == 64) =>
        {
            // SAFETY: the CPU has AVX-512 VNNI and AMX-INT8, and the process holds the tile
            // state (the `Cpu` token proves both); the block is one the kernel takes; the
            // layout, the row range, the activations and the output were checked above.
            unsafe { super::x86::amx::q8p::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => {
            // SAFETY: the CPU has AVX-512 F/BW/VL/VNNI, F16C and FMA (the `Cpu` token proves it);
            // the layout, the row range, the activations and the output were checked above.
            unsafe { super::x86::avx512::q8p::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: as above, for AVX2, FMA and F16C.
            unsafe { super::x86::avx2::q8p::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::I8mm if p.block % 16 == 0 && acts.len() >= 2 => {
            // SAFETY: the CPU has dotprod and i8mm (the `Cpu` token proves it); the block holds
            // whole sets of 4 code vectors; the layout, the row range, the activations and the
            // output were checked above.
            unsafe { super::aarch64::q8p::dot_rows_tokens_i8mm(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod | Isa::I8mm if p.block % 16 == 0 => {
            // SAFETY: as above, for dotprod.
            unsafe { super::aarch64::q8p::dot_rows_tokens_dotprod(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon if p.block % 16 == 0 => {
            // SAFETY: as above, for NEON.
            unsafe { super::aarch64::q8p::dot_rows_tokens_neon(p, first, count, acts, out) }
        }
        _ => dot_rows_tokens_scalar(p, first, count, acts, out),
    }
}

/// The scalar twin, read straight from the packed layout.
pub fn dot_rows_tokens_scalar(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let dw = p.block / 4;
    for (t, a) in acts.iter().enumerate() {
        for i in 0..count {
            let r = first + i;
            let k = r % GROUP;
            let mut total = 0.0f32;
            for b in 0..p.blocks() {
                let rec = p.record_of(r, b);
                let s =
                    f16::from_le_bytes([rec[dw * 64 + k * 2], rec[dw * 64 + k * 2 + 1]]).to_f32();
                let mut dot = 0i32;
                for w in 0..dw {
                    for j in 0..4 {
                        let q = (rec[w * 64 + k * 4 + j] ^ 0x80) as i8 as i32;
                        dot += q * a.q[b * p.block + w * 4 + j] as i32;
                    }
                }
                total += s * a.scale[b] * dot as f32;
            }
            out[t * count + i] = total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;
    use pocket_formats::quant::q8 as codec;

    #[test]
    fn packed_matches_row_major() {
        let mut rng = Rng(19);
        for &(rows, cols, block) in &[(16, 64, 64), (32, 896, 64), (48, 256, 128), (16, 2560, 64)] {
            let v = rng.vec(rows * cols, 0.2);
            let (bytes, _) = codec::quantize(&v, rows, cols, block);
            let (codes, scales) = bytes.split_at(rows * cols);
            let w = Q8Matrix {
                codes,
                scales,
                rows,
                cols,
                block,
            };
            let p = PackedQ8::pack(&w).unwrap();
            // The load-time repack writes the file layout's bytes (quant::rows16).
            let file = rows16::pack(QuantType::Q8 { block }, &bytes, rows, cols).unwrap();
            assert!(
                p.data[..] == file[..],
                "{rows}x{cols} b{block}: rows16 bytes"
            );
            let nb = cols / block;
            let (mut a, mut b) = (vec![0.0; cols], vec![0.0; cols]);
            for r in 0..rows {
                codec::dequantize_row(
                    &codes[r * cols..][..cols],
                    &scales[r * nb * 2..][..nb * 2],
                    block,
                    &mut a,
                );
                p.row(r, &mut b);
                assert_eq!(a, b, "row {r}");
            }
            let acts: Vec<QuantActs> = (0..5)
                .map(|_| {
                    let mut a = QuantActs::default();
                    a.quantize(crate::Cpu::detect(), &rng.vec(cols, 2.0), block, 0);
                    a
                })
                .collect();
            let (first, count) = (GROUP * (rows / GROUP > 1) as usize, GROUP);
            for isa in crate::available() {
                let mut got = vec![0.0; acts.len() * count];
                dot_rows_tokens(isa, &p, first, count, &acts, &mut got);
                for (t, a) in acts.iter().enumerate() {
                    let mut want = vec![0.0; count];
                    crate::q8::dot_rows_scalar(&w, first, a, &mut want);
                    for (g, e) in got[t * count..(t + 1) * count].iter().zip(&want) {
                        assert!(
                            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{isa:?} {rows}x{cols}: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }
}
