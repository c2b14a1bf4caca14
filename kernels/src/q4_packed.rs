//! Q4 weights in the SIMD kernels' layout (stored so in `.pocket` version 2 files as `rows16`,
//! repacked at load from any other source): 16 rows interleaved, so each
//! 32-bit lane of a vector holds one row's 8 codes and a `vpdpbusd` against one broadcast
//! activation dword advances 16 rows at once. A block's 16 integer dot products then meet
//! their scales with one multiply-add and no horizontal sums, instead of a convert, a scale
//! multiply and a multiply-add per 128 weights of every row: about half the instructions of
//! the row-major kernel, which on this machine is what bounds decode and prefill. AVX2 takes
//! each 64-byte vector as two 8-row halves (`vpmaddubsw` instead of `vpdpbusd`).
//!
//! Layout: for each group of 16 rows and each block, one record of `block/8` vectors of 64
//! bytes (vector `i`, lane `k` = dword `i` of that block of row `16g + k`, i.e. its codes for
//! weights `8i..8i+8`, high nibble first), then the block's parameters for the 16 rows (f16
//! zeros then f16 scales, or scales alone when symmetric). Same bytes as the row-major form.
//!
//! Activations meet it in chunks of 8 ([`ACT_CHUNK`]): the 4 even-position values of each
//! 8 (high nibbles), then the 4 odd ones.

use super::act::QuantActs;
use super::interleave::{interleave, PackedBytes};
use super::q4::Q4Matrix;
use super::{Cpu, Isa};
use half::f16;
use pocket_formats::quant::{rows16, QuantType};

pub use super::interleave::GROUP;
pub use super::q4_form::Form;
/// The activation chunk these kernels read (see [`QuantActs::perm`]).
pub const ACT_CHUNK: usize = 8;

/// A Q4 matrix in the 16-row interleaved layout.
pub struct PackedQ4 {
    pub data: PackedBytes,
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
    pub sym: bool,
    pub form: Form,
}

impl PackedQ4 {
    /// Repacks `w`; `None` when the shape does not fit the layout (rows a multiple of 16,
    /// block 32, 64 or 128).
    pub fn pack(w: &Q4Matrix) -> Option<PackedQ4> {
        let dtype = QuantType::Q4 {
            block: w.block,
            sym: w.sym,
        };
        if !rows16::fits(dtype, w.rows, w.cols) {
            return None;
        }
        let p = PackedQ4 {
            data: PackedBytes::Owned(Vec::new()),
            rows: w.rows,
            cols: w.cols,
            block: w.block,
            sym: w.sym,
            form: Form::POCKET,
        };
        let (nb, dw, pb) = (p.blocks(), p.block / 8, if w.sym { 2 } else { 4 });
        let mut data = PackedBytes::zeroed(p.rows / GROUP * nb * p.record());
        use rayon::prelude::*;
        let cpu = super::Cpu::detect(); // packing gives the same bytes on every ISA
        data.as_mut_slice()
            .par_chunks_exact_mut(nb * p.record())
            .enumerate()
            .for_each(|(g, grp)| {
                for (b, rec) in grp.chunks_exact_mut(p.record()).enumerate() {
                    let row_bytes = w.cols / 2;
                    let src = &w.codes[g * GROUP * row_bytes + b * w.block / 2..];
                    interleave(cpu, src, row_bytes, dw, rec, 0);
                    for k in 0..GROUP {
                        let r = g * GROUP + k;
                        let par = &w.params[(r * nb + b) * pb..][..pb];
                        let at = dw * 64;
                        if w.sym {
                            rec[at + k * 2..][..2].copy_from_slice(par);
                        } else {
                            rec[at + k * 2..][..2].copy_from_slice(&par[..2]);
                            rec[at + 32 + k * 2..][..2].copy_from_slice(&par[2..]);
                        }
                    }
                }
            });
        Some(PackedQ4 { data, ..p })
    }

    /// A matrix stored in this layout (a `.pocket` tensor in `rows16`), used in place.
    pub fn mapped(
        data: pocket_formats::bytes::ByteView,
        rows: usize,
        cols: usize,
        block: usize,
        sym: bool,
    ) -> Option<PackedQ4> {
        let data = PackedBytes::mapped(data, QuantType::Q4 { block, sym }, rows, cols)?;
        Some(PackedQ4 {
            data,
            rows,
            cols,
            block,
            sym,
            form: Form::POCKET,
        })
    }

    /// Packs a matrix given row by row as codes and per-block parameters: `unpack(r, codes,
    /// scales, zeros)` fills logical row `r` (`cols` codes below `2^(4 + hi_bits)`, one scale
    /// and zero per block). `None` when the shape does not fit (rows a multiple of 16, block
    /// 16 or 32 with high-bit planes, 32, 64 or 128 without, f16 parameters exact).
    pub fn from_codes(
        rows: usize,
        cols: usize,
        block: usize,
        sym: bool,
        form: Form,
        unpack: impl Fn(usize, &mut [u8], &mut [f32], &mut [f32]) + Sync,
    ) -> Option<PackedQ4> {
        let blocks_ok = if form.hi_bits > 0 {
            [16, 32].contains(&block)
        } else {
            [16, 32, 64, 128].contains(&block)
        };
        if !rows.is_multiple_of(GROUP)
            || !blocks_ok
            || !cols.is_multiple_of(block)
            || form.hi_bits > 2
            || (form.table.is_some() && (form.hi_bits > 0 || form.offset != 0))
        {
            return None;
        }
        let p = PackedQ4 {
            data: PackedBytes::Owned(Vec::new()),
            rows,
            cols,
            block,
            sym,
            form,
        };
        let (nb, rec, vw) = (p.blocks(), p.record(), block / 8);
        let mut data = PackedBytes::zeroed(rows / GROUP * nb * rec);
        use rayon::prelude::*;
        data.as_mut_slice()
            .par_chunks_exact_mut(nb * rec)
            .enumerate()
            .for_each(|(g, grp)| {
                let mut codes = vec![0u8; cols];
                let (mut sc, mut ze) = (vec![0.0f32; nb], vec![0.0f32; nb]);
                for k in 0..GROUP {
                    unpack(g * GROUP + k, &mut codes, &mut sc, &mut ze);
                    for (b, rec) in grp.chunks_exact_mut(rec).enumerate() {
                        let c = &codes[b * block..][..block];
                        for i in 0..vw {
                            for j in 0..4 {
                                let (ch, cl) = (c[i * 8 + 2 * j], c[i * 8 + 2 * j + 1]);
                                rec[i * 64 + k * 4 + j] = (ch & 0x0F) << 4 | (cl & 0x0F);
                                for pl in 0..form.hi_bits as usize {
                                    for (h, code) in [ch, cl].into_iter().enumerate() {
                                        if (code >> (4 + pl)) & 1 == 1 {
                                            let bit = pl * 2 * vw + 2 * i + h;
                                            rec[vw * 64 + bit / 8 * 64 + k * 4 + j] |=
                                                1 << (bit % 8);
                                        }
                                    }
                                }
                            }
                        }
                        let at = p.params_at();
                        let (s, z) = (sc[b], ze[b]);
                        if form.wide {
                            let so = if sym { 0 } else { 64 };
                            rec[at + so + k * 4..][..4].copy_from_slice(&s.to_le_bytes());
                            if !sym {
                                rec[at + k * 4..][..4].copy_from_slice(&z.to_le_bytes());
                            }
                        } else {
                            let so = if sym { 0 } else { 32 };
                            let s = f16::from_f32(s).to_le_bytes();
                            rec[at + so + k * 2..][..2].copy_from_slice(&s);
                            if !sym {
                                let z = f16::from_f32(z).to_le_bytes();
                                rec[at + k * 2..][..2].copy_from_slice(&z);
                            }
                        }
                    }
                }
            });
        Some(PackedQ4 { data, ..p })
    }

    pub fn blocks(&self) -> usize {
        self.cols / self.block
    }

    /// Bytes of one (group, block) record.
    pub fn record(&self) -> usize {
        let per = if self.form.wide { 4 } else { 2 };
        self.params_at() + GROUP * per * if self.sym { 1 } else { 2 }
    }

    /// Vectors of high-bit planes per record.
    pub fn hi_vectors(&self) -> usize {
        (self.form.hi_bits as usize * 2 * (self.block / 8)).div_ceil(8)
    }

    /// Where a record's parameters start: after its code vectors and high-bit planes.
    pub fn params_at(&self) -> usize {
        (self.block / 8 + self.hi_vectors()) * 64
    }

    /// Row `r`'s record for block `b`, and its (zero, scale) for that block (zero 0 when
    /// symmetric).
    #[inline]
    pub(super) fn at(&self, r: usize, b: usize) -> (&[u8], f32, f32) {
        let (g, k) = (r / GROUP, r % GROUP);
        let rec = &self.data[(g * self.blocks() + b) * self.record()..][..self.record()];
        let at = self.params_at();
        if self.form.wide {
            let f = |o: usize| f32::from_le_bytes(rec[o..o + 4].try_into().expect("4 bytes"));
            return if self.sym {
                (rec, 0.0, f(at + k * 4))
            } else {
                (rec, f(at + k * 4), f(at + 64 + k * 4))
            };
        }
        let f = |o: usize| f16::from_le_bytes([rec[o], rec[o + 1]]).to_f32();
        if self.sym {
            (rec, 0.0, f(at + k * 2))
        } else {
            (rec, f(at + k * 2), f(at + 32 + k * 2))
        }
    }

    /// The code of lane `k`'s weight at byte `j` of code vector `i` of `rec` (`h`: 0 the high
    /// nibble, 1 the low), high-bit planes included.
    #[inline]
    pub(super) fn code(&self, rec: &[u8], k: usize, i: usize, j: usize, h: usize) -> u8 {
        let byte = rec[i * 64 + k * 4 + j];
        let mut c = if h == 0 { byte >> 4 } else { byte & 0x0F };
        let vw = self.block / 8;
        for pl in 0..self.form.hi_bits as usize {
            let bit = pl * 2 * vw + 2 * i + h;
            c |= ((rec[(vw + bit / 8) * 64 + k * 4 + j] >> (bit % 8)) & 1) << (4 + pl);
        }
        c
    }

    /// Row `r` decoded to f32: its row-major codes and parameters gathered back, then the
    /// codec's own decoder, so the values are bit for bit those of the stored form (for
    /// other forms `(code − offset)·scale + zero`, ggml's arithmetic).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols);
        if self.form != Form::POCKET {
            let k = r % GROUP;
            for (b, out) in out.chunks_exact_mut(self.block).enumerate() {
                let (rec, z, s) = self.at(r, b);
                let z = if self.sym { -0.0 } else { z };
                for (w, o) in out.iter_mut().enumerate() {
                    let c = self.code(rec, k, w / 8, w % 8 / 2, w % 2);
                    let v = self.form.int_value(c) as f32 - self.form.offset as f32;
                    *o = v * s + z;
                }
            }
            return;
        }
        let (nb, dw, k) = (self.blocks(), self.block / 8, r % GROUP);
        let pb = pocket_formats::quant::q4::param_bytes(self.sym);
        let mut codes = vec![0u8; self.cols / 2];
        let mut params = vec![0u8; nb * pb];
        for b in 0..nb {
            let rec = &self.data[((r / GROUP) * nb + b) * self.record()..][..self.record()];
            for i in 0..dw {
                codes[b * self.block / 2 + i * 4..][..4]
                    .copy_from_slice(&rec[i * 64 + k * 4..][..4]);
            }
            let at = dw * 64;
            if self.sym {
                params[b * 2..][..2].copy_from_slice(&rec[at + k * 2..][..2]);
            } else {
                params[b * 4..][..2].copy_from_slice(&rec[at + k * 2..][..2]);
                params[b * 4 + 2..][..2].copy_from_slice(&rec[at + 32 + k * 2..][..2]);
            }
        }
        pocket_formats::quant::q4::dequantize_row(&codes, &params, self.block, self.sym, out);
    }
}

/// `out[t·count + i] = row(first + i) · x_t` with `first` and `count` multiples of 16 and
/// every `acts[t]` quantized in the matrix's block with chunk [`ACT_CHUNK`].
pub fn dot_rows_tokens(
    cpu: Cpu,
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    assert!(first % GROUP == 0 && count % GROUP == 0 && first + count <= p.rows);
    assert!(
        out.len() == acts.len() * count && p.data.len() == p.rows / GROUP * p.blocks() * p.record()
    );
    assert!(acts
        .iter()
        .all(|a| a.cols == p.cols && a.block == p.block && a.chunk == ACT_CHUNK));
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Amx
            if acts.len() >= super::x86::amx::q4p::MIN_TOKENS
                && p.block <= super::x86::amx::q4p::MAX_BLOCK =>
        {
            // SAFETY: the CPU has AVX-512 VNNI and AMX-INT8, and the process holds the tile
            // state (the `Cpu` token proves both); the block is at most the kernel's; the
            // layout, the row range, the activations and the output were checked above.
            unsafe { super::x86::amx::q4p::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => {
            // SAFETY: the CPU has AVX-512 F/BW/VL/VNNI, F16C and FMA (the `Cpu` token proves it);
            // the layout, the row range, the activations and the output were checked above.
            unsafe { super::x86::avx512::q4p::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: as above, for AVX2, FMA and F16C.
            unsafe { super::x86::avx2::q4p::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::I8mm if p.form.hi_bits == 0 && acts.len() >= 2 => {
            // SAFETY: the CPU has dotprod and i8mm (the `Cpu` token proves it); the form has no
            // high-bit planes; the layout, the row range, the activations and the output were
            // checked above.
            unsafe { super::aarch64::q4p_mmla::dot_rows_tokens(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod | Isa::I8mm => {
            // SAFETY: as above, for dotprod.
            unsafe { super::aarch64::q4p::dot_rows_tokens_dotprod(p, first, count, acts, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => {
            // SAFETY: as above, for NEON.
            unsafe { super::aarch64::q4p::dot_rows_tokens_neon(p, first, count, acts, out) }
        }
        _ => dot_rows_tokens_scalar(p, first, count, acts, out),
    }
}

/// The scalar twin, read straight from the packed layout.
pub fn dot_rows_tokens_scalar(
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    for (t, a) in acts.iter().enumerate() {
        for i in 0..count {
            let r = first + i;
            let k = r % GROUP;
            let mut total = 0.0f32;
            for b in 0..p.blocks() {
                let (rec, z, s) = p.at(r, b);
                let mut dot = 0i32;
                for w in 0..p.block / 8 {
                    for j in 0..4 {
                        let x = &a.q[b * p.block + w * 8 + j * 2..];
                        dot += p.form.int_value(p.code(rec, k, w, j, 0)) * x[0] as i32
                            + p.form.int_value(p.code(rec, k, w, j, 1)) * x[1] as i32;
                    }
                }
                let off = p.form.offset as f32;
                total += s * a.scale[b] * dot as f32 + (z - off * s) * a.scaled_sum[b];
            }
            out[t * count + i] = total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{each_q4_case, Rng};
    use crate::w4a16::{block_sums, dot_rows_f32, dot_rows_f32_scalar};
    use pocket_formats::quant::q4 as codec;

    /// The packed rows decode to the row-major rows, and every path's dot products equal the
    /// row-major scalar twin's.
    #[test]
    fn packed_matches_row_major() {
        let mut rng = Rng(17);
        each_q4_case(
            &mut rng,
            &[(16, 64), (32, 896), (48, 128), (64, 256), (16, 2560)],
            |rng, rows, cols, block, sym, bytes| {
                let w = Q4Matrix::from_bytes(bytes, rows, cols, block, sym);
                let p = PackedQ4::pack(&w).unwrap();
                // The load-time repack writes the file layout's bytes (quant::rows16).
                let file = rows16::pack(QuantType::Q4 { block, sym }, bytes, rows, cols).unwrap();
                assert!(
                    p.data[..] == file[..],
                    "{rows}x{cols} b{block}: rows16 bytes"
                );
                let (codes, params) = codec::planes(bytes, rows, cols);
                let pl = cols / block * codec::param_bytes(sym);
                let (mut a, mut b) = (vec![0.0; cols], vec![0.0; cols]);
                for r in 0..rows {
                    codec::dequantize_row(
                        &codes[r * cols / 2..][..cols / 2],
                        &params[r * pl..][..pl],
                        block,
                        sym,
                        &mut a,
                    );
                    p.row(r, &mut b);
                    assert_eq!(a, b, "row {r}");
                }
                let xs: Vec<Vec<f32>> = (0..13).map(|_| rng.vec(cols, 2.0)).collect();
                let acts: Vec<QuantActs> = xs
                    .iter()
                    .map(|x| {
                        let mut a = QuantActs::default();
                        a.quantize(crate::Cpu::detect(), x, block, ACT_CHUNK);
                        a
                    })
                    .collect();
                // From the second group on: one group, or (48 and 64 rows) a pair of
                // groups, then a lone one, as the 4-token prefill tiles take them.
                let first = GROUP * (rows / GROUP > 1) as usize;
                let count = if rows >= 48 { rows - first } else { GROUP };
                for isa in crate::available() {
                    let mut got = vec![0.0; acts.len() * count];
                    dot_rows_tokens(isa, &p, first, count, &acts, &mut got);
                    for (t, a) in acts.iter().enumerate() {
                        let mut want = vec![0.0; count];
                        crate::q4::dot_rows_scalar(&w, first, a, &mut want);
                        for (g, e) in got[t * count..(t + 1) * count].iter().zip(&want) {
                            assert!(
                                (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                                "{isa:?} {rows}x{cols} b{block} sym={sym}: {g} vs {e}"
                            );
                        }
                    }
                }
            },
        );
    }
    /// A GGUF's 4-, 5- and 6-bit types packed from their codes (`gguf::codes`): rows decode
    /// bit for bit to ggml's own dequantization (the carry-over is lossless), and on every
    /// instruction set both kernels equal their scalar twins, which equal the decoded rows.
    #[test]
    fn ggml_forms_are_lossless_and_every_path_agrees() {
        use pocket_formats::gguf::{codes, ggml};
        let mut rng = Rng(31);
        let mut seed = 11;
        for ty in codes::TYPES {
            for (rows, cols) in [(48, 512), (16, 768)] {
                let cf = codes::form(ty).unwrap();
                let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
                let data = codes::sample_blocks(ty, rows * row_bytes / ty.block().1, &mut seed);
                let form = Form::of(cf);
                let p =
                    PackedQ4::from_codes(rows, cols, cf.block, !cf.has_zero, form, |r, c, s, z| {
                        codes::unpack(ty, &data[r * row_bytes..][..row_bytes], c, s, z)
                    })
                    .unwrap();
                let mut decoded = vec![0.0f32; rows * cols];
                let (mut want, mut got) = (vec![0.0; cols], vec![0.0; cols]);
                for r in 0..rows {
                    ggml::dequantize(ty, &data[r * row_bytes..][..row_bytes], &mut want);
                    p.row(r, &mut got);
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{ty:?} row {r}: not bit-identical");
                    decoded[r * cols..][..cols].copy_from_slice(&got);
                }
                let (first, count) = (
                    GROUP * (rows > GROUP) as usize,
                    rows - GROUP * (rows > GROUP) as usize,
                );
                // 9, 17 and 33 tokens take AMX's one and two 16-row tiles, and two spans.
                for n in [1, 2, 4, 5, 9, 17, 33] {
                    let x = rng.vec(n * cols, 2.0);
                    let acts: Vec<QuantActs> = x
                        .chunks_exact(cols)
                        .map(|x| {
                            let mut a = QuantActs::default();
                            a.quantize(crate::Cpu::detect(), x, cf.block, ACT_CHUNK);
                            a
                        })
                        .collect();
                    let mut int_want = vec![0.0; n * count];
                    dot_rows_tokens_scalar(&p, first, count, &acts, &mut int_want);
                    let sums = block_sums(&x, cf.block);
                    let mut f32_want = vec![0.0; n * count];
                    dot_rows_f32_scalar(&p, first, count, &x, &sums, &mut f32_want);
                    // Per output, the sum of the products' magnitudes: large zero points
                    // (K-quants) cancel, so rounding is relative to this, not to the result.
                    let mut norms = vec![0.0f64; n * count];
                    for t in 0..n {
                        for i in 0..count {
                            let w = &decoded[(first + i) * cols..][..cols];
                            let xt = &x[t * cols..][..cols];
                            let exact: f64 =
                                w.iter().zip(xt).map(|(a, b)| *a as f64 * *b as f64).sum();
                            let norm: f64 = w
                                .iter()
                                .zip(xt)
                                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                                .sum();
                            norms[t * count + i] = norm;
                            let f = f32_want[t * count + i] as f64;
                            assert!(
                                (f - exact).abs() <= 1e-5 * (1.0 + norm),
                                "{ty:?} f32 twin: {f} vs {exact}"
                            );
                            // int8 activations: about 1 % of the sum of magnitudes at worst.
                            let q = int_want[t * count + i] as f64;
                            assert!(
                                (q - exact).abs() <= 2e-2 * (1.0 + norm),
                                "{ty:?} int8 twin: {q} vs {exact}"
                            );
                        }
                    }
                    for isa in crate::available() {
                        let mut got = vec![0.0; n * count];
                        dot_rows_tokens(isa, &p, first, count, &acts, &mut got);
                        for ((g, e), m) in got.iter().zip(&int_want).zip(&norms) {
                            let d = (g - e).abs() as f64;
                            assert!(
                                d <= 1e-5 * (1.0 + m),
                                "{isa:?} {ty:?} int8 n={n}: {g} vs {e}"
                            );
                        }
                        // Each token's outputs are those of a one-token call, bit for bit.
                        let mut one = vec![0.0; count];
                        for t in 0..n {
                            dot_rows_tokens(isa, &p, first, count, &acts[t..t + 1], &mut one);
                            let all = &got[t * count..][..count];
                            let same = all
                                .iter()
                                .zip(&one)
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(same, "{isa:?} {ty:?} n={n}: token {t} differs from alone");
                        }
                        dot_rows_f32(isa, &p, first, count, &x, &sums, &mut got);
                        for ((g, e), m) in got.iter().zip(&f32_want).zip(&norms) {
                            let d = (g - e).abs() as f64;
                            assert!(
                                d <= 1e-5 * (1.0 + m),
                                "{isa:?} {ty:?} f32 n={n}: {g} vs {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}
