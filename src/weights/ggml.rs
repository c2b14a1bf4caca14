//! A GGUF's quantized weights in the packed kernel layouts, carried over value for value:
//! Q8_0 is the engine's Q8 with blocks of 32; Q4_0/Q4_1, Q5_0/Q5_1, the K-quants (Q4_K,
//! Q5_K, Q6_K) and the non-uniform IQ4_NL/IQ4_XS are packed Q4 records with their own
//! [`Form`] (offset, high-bit planes, f32 parameters, value table), from
//! `pocket_formats::gguf::codes`. Rows are stored in logical order, so
//! llama.cpp's q/k row order for `llama` models is undone here, once, at load.

use super::Packed;
use crate::kernels::q4_packed::{Form, PackedQ4};
use crate::kernels::q8_packed::PackedQ8;
use pocket_formats::gguf::{codes, GgmlType};

/// The packed form of a `[rows, cols]` matrix of `ty` blocks (`bytes`, rows in file order;
/// `row_map[r]` the stored row of logical row `r`). `None` for dense types and shapes the
/// layouts do not take (rows not a multiple of 16), which keep the row decode.
pub(super) fn pack(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bytes: &[u8],
    row_map: Option<&[u32]>,
) -> Option<Packed> {
    let row_bytes = ty.bytes_for(cols as u64)? as usize;
    let row = |r: usize| {
        let r = row_map.map_or(r, |m| m[r] as usize);
        &bytes[r * row_bytes..][..row_bytes]
    };
    if ty == GgmlType::Q8_0 {
        let (_, bb) = ty.block();
        return PackedQ8::from_codes(rows, cols, 32, |r, codes, scales| {
            for (b, blk) in row(r).chunks_exact(bb).enumerate() {
                scales[b * 2..][..2].copy_from_slice(&blk[..2]);
                codes[b * 32..][..32].copy_from_slice(&blk[2..]);
            }
        })
        .map(Packed::Q8);
    }
    let cf = codes::form(ty)?;
    PackedQ4::from_codes(
        rows,
        cols,
        cf.block,
        !cf.has_zero,
        Form::of(cf),
        |r, c, s, z| codes::unpack(ty, row(r), c, s, z),
    )
    .map(Packed::Q4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::act::QuantActs;
    use crate::kernels::testutil::Rng;
    use crate::kernels::{q8::Q8Matrix, q8_packed};
    use pocket_formats::gguf::ggml;

    /// Q8_0 packs bit for bit (rows decode to ggml's values, in the row map's order), and its
    /// kernels on every instruction set equal the row-major scalar kernel on the same codes.
    #[test]
    fn q8_0_is_lossless_and_every_path_agrees() {
        let (rows, cols) = (48, 352);
        let ty = GgmlType::Q8_0;
        let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
        let data = codes::sample_blocks(ty, rows * cols / 32, &mut 5);
        let map: Vec<u32> = (0..rows as u32).rev().collect();
        let Some(Packed::Q8(p)) = pack(ty, rows, cols, &data, Some(&map)) else {
            panic!("Q8_0 packs");
        };
        let (mut want, mut got) = (vec![0.0; cols], vec![0.0; cols]);
        let (mut codes, mut scales) = (vec![0u8; rows * cols], vec![0u8; rows * cols / 16]);
        for r in 0..rows {
            let src = &data[map[r] as usize * row_bytes..][..row_bytes];
            ggml::dequantize(ty, src, &mut want);
            p.row(r, &mut got);
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "row {r}"
            );
            for (b, blk) in src.chunks_exact(34).enumerate() {
                scales[(r * cols / 32 + b) * 2..][..2].copy_from_slice(&blk[..2]);
                codes[r * cols + b * 32..][..32].copy_from_slice(&blk[2..]);
            }
        }
        let w = Q8Matrix {
            codes: &codes,
            scales: &scales,
            rows,
            cols,
            block: 32,
        };
        let mut rng = Rng(3);
        let acts: Vec<QuantActs> = (0..5)
            .map(|_| {
                let mut a = QuantActs::default();
                a.quantize(crate::kernels::Cpu::detect(), &rng.vec(cols, 2.0), 32, 0);
                a
            })
            .collect();
        let (first, count) = (16, 32);
        // Rounding is relative to the terms' magnitudes, the AVX-512 kernel's `128·Σx` taken
        // back included: |w|·|x| + 128·|scale|·|x| per weight.
        let norm = |r: usize, a: &QuantActs| -> f32 {
            let x = a.dequantize();
            (0..cols)
                .map(|c| {
                    let s = half::f16::from_le_bytes([
                        scales[(r * cols / 32 + c / 32) * 2],
                        scales[(r * cols / 32 + c / 32) * 2 + 1],
                    ]);
                    ((codes[r * cols + c] as i8 as f32).abs() + 128.0)
                        * s.to_f32().abs()
                        * x[c].abs()
                })
                .sum()
        };
        for isa in crate::kernels::Cpu::each() {
            let mut got = vec![0.0; acts.len() * count];
            q8_packed::dot_rows_tokens(isa, &p, first, count, &acts, &mut got);
            for (t, a) in acts.iter().enumerate() {
                let mut want = vec![0.0; count];
                crate::kernels::q8::dot_rows_scalar(&w, first, a, &mut want);
                for (i, (g, e)) in got[t * count..][..count].iter().zip(&want).enumerate() {
                    let tol = 1e-5 * (1.0 + norm(first + i, a));
                    assert!((g - e).abs() <= tol, "{isa:?}: {g} vs {e}");
                }
            }
        }
    }

    /// The K-quant, 5-bit and non-uniform forms pack with the row map applied: logical row r
    /// decodes to stored row map[r].
    #[test]
    fn row_map_is_applied_once_at_pack() {
        for ty in [
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q4K,
            GgmlType::Q6K,
            GgmlType::IQ4NL,
            GgmlType::IQ4XS,
        ] {
            let (rows, cols) = (32, 256);
            let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
            let data = codes::sample_blocks(ty, rows * row_bytes / ty.block().1, &mut 9);
            let map: Vec<u32> = (0..rows as u32).map(|r| (r * 7) % rows as u32).collect();
            let Some(Packed::Q4(p)) = pack(ty, rows, cols, &data, Some(&map)) else {
                panic!("{ty:?} packs");
            };
            let (mut want, mut got) = (vec![0.0; cols], vec![0.0; cols]);
            for r in 0..rows {
                ggml::dequantize(
                    ty,
                    &data[map[r] as usize * row_bytes..][..row_bytes],
                    &mut want,
                );
                p.row(r, &mut got);
                assert!(
                    want.iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{ty:?} row {r}"
                );
            }
        }
    }
}
