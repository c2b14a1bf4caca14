//! The `rows16` tensor layout of `.pocket` files: Q4 and Q8 matrices stored the way the SIMD
//! kernels read them, 16 rows interleaved, so the engine maps them and runs without repacking
//! (no copy, no load-time work, pages shared with the page cache). Same bytes as the row-major
//! form, rearranged; this module is the layout's definition (scalar, used when writing and
//! when another tool needs row-major bytes back). docs/format.md describes it.
//!
//! For each group of 16 rows `16g..16g+16` and each block `b`, one record:
//! - Q4: `block/8` vectors of 64 bytes, vector `i` lane `k` = code bytes `4i..4i+4` of block
//!   `b` of row `16g+k` (8 codes, high nibble first, as in the row-major form); then the
//!   rows' block parameters: symmetric, 16 f16 scales; asymmetric, the 16 first halves of the
//!   (zero, scale) pairs then the 16 second halves.
//! - Q8: `block/4` vectors of 64 bytes, vector `i` lane `k` = codes `4i..4i+4` of block `b` of
//!   row `16g+k`, each xor 0x80 (the unsigned operand of `vpdpbusd`); then the 16 f16 scales.

use super::QuantType;

/// Rows per interleaved group.
pub const GROUP: usize = 16;

/// Whether a `[rows, cols]` matrix of `dtype` can be stored as `rows16`.
pub fn fits(dtype: QuantType, rows: usize, cols: usize) -> bool {
    rows.is_multiple_of(GROUP)
        && match dtype {
            QuantType::Q4 { block, .. } => {
                [32, 64, 128].contains(&block) && cols.is_multiple_of(block)
            }
            QuantType::Q8 { block } => {
                block > 0 && block.is_multiple_of(64) && cols.is_multiple_of(block)
            }
            _ => false,
        }
}

/// The per-(group, block) record size, parameters included.
fn record(dtype: QuantType) -> (usize, usize) {
    match dtype {
        QuantType::Q4 { block, sym } => (block / 8, if sym { 32 } else { 64 }),
        QuantType::Q8 { block } => (block / 4, 32),
        _ => unreachable!("checked by fits"),
    }
}

/// Row-major bytes → `rows16`. `None` when the shape does not fit or the length is wrong.
pub fn pack(dtype: QuantType, bytes: &[u8], rows: usize, cols: usize) -> Option<Vec<u8>> {
    if !fits(dtype, rows, cols) || dtype.byte_size(rows, cols) != Some(bytes.len()) {
        return None;
    }
    let mut out = vec![0u8; bytes.len()];
    walk(dtype, rows, cols, |packed, row_major| {
        out[packed.0..packed.0 + packed.1].copy_from_slice(&bytes[row_major..][..packed.1]);
        if packed.2 {
            out[packed.0..packed.0 + 4]
                .iter_mut()
                .for_each(|b| *b ^= 0x80);
        }
    });
    Some(out)
}

/// `rows16` bytes → row-major. `None` when the shape does not fit or the length is wrong.
pub fn unpack(dtype: QuantType, bytes: &[u8], rows: usize, cols: usize) -> Option<Vec<u8>> {
    if !fits(dtype, rows, cols) || dtype.byte_size(rows, cols) != Some(bytes.len()) {
        return None;
    }
    let mut out = vec![0u8; bytes.len()];
    walk(dtype, rows, cols, |packed, row_major| {
        let dst = &mut out[row_major..][..packed.1];
        dst.copy_from_slice(&bytes[packed.0..packed.0 + packed.1]);
        if packed.2 {
            dst.iter_mut().for_each(|b| *b ^= 0x80);
        }
    });
    Some(out)
}

/// Calls `f((packed offset, length, flip), row-major offset)` for every run of bytes that the
/// layout moves: 4 code bytes at a time, 2 parameter bytes at a time.
fn walk(
    dtype: QuantType,
    rows: usize,
    cols: usize,
    mut f: impl FnMut((usize, usize, bool), usize),
) {
    let (words, params) = record(dtype);
    let rec = words * 64 + params;
    let (block, flip) = match dtype {
        QuantType::Q4 { block, .. } => (block, false),
        QuantType::Q8 { block } => (block, true),
        _ => unreachable!("checked by fits"),
    };
    let nb = cols / block;
    // Code bytes per row and per block; the parameter plane follows all codes.
    let (row_codes, block_codes) = match dtype {
        QuantType::Q4 { .. } => (cols / 2, block / 2),
        _ => (cols, block),
    };
    let codes_total = rows * row_codes;
    let pb = match dtype {
        QuantType::Q4 { sym: false, .. } => 4,
        _ => 2,
    };
    for g in 0..rows / GROUP {
        for b in 0..nb {
            let at = (g * nb + b) * rec;
            for k in 0..GROUP {
                let r = g * GROUP + k;
                for i in 0..words {
                    f(
                        (at + i * 64 + k * 4, 4, flip),
                        r * row_codes + b * block_codes + i * 4,
                    );
                }
                let par = codes_total + (r * nb + b) * pb;
                f((at + words * 64 + k * 2, 2, false), par);
                if pb == 4 {
                    f((at + words * 64 + 32 + k * 2, 2, false), par + 2);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_then_unpack_is_identity_and_moves_every_byte() {
        for (dtype, rows, cols) in [
            (
                QuantType::Q4 {
                    block: 64,
                    sym: false,
                },
                32,
                128,
            ),
            (
                QuantType::Q4 {
                    block: 32,
                    sym: true,
                },
                16,
                96,
            ),
            (
                QuantType::Q4 {
                    block: 128,
                    sym: false,
                },
                48,
                256,
            ),
            (QuantType::Q8 { block: 64 }, 32, 192),
            (QuantType::Q8 { block: 128 }, 16, 256),
        ] {
            let n = dtype.byte_size(rows, cols).unwrap();
            let bytes: Vec<u8> = (0..n).map(|i| (i * 131 % 251) as u8).collect();
            let packed = pack(dtype, &bytes, rows, cols).unwrap();
            assert_ne!(packed, bytes, "{dtype}");
            let mut sorted_a = packed.clone();
            let mut sorted_b: Vec<u8> = match dtype {
                QuantType::Q8 { .. } => bytes
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| if i < rows * cols { b ^ 0x80 } else { b })
                    .collect(),
                _ => bytes.clone(),
            };
            sorted_a.sort_unstable();
            sorted_b.sort_unstable();
            assert_eq!(sorted_a, sorted_b, "{dtype}: a permutation of the bytes");
            assert_eq!(
                unpack(dtype, &packed, rows, cols).unwrap(),
                bytes,
                "{dtype}"
            );
        }
    }

    #[test]
    fn refuses_shapes_and_types_outside_the_layout() {
        let q4 = QuantType::Q4 {
            block: 64,
            sym: false,
        };
        assert!(!fits(q4, 17, 128));
        assert!(!fits(
            QuantType::Q4 {
                block: 16,
                sym: false
            },
            16,
            128
        ));
        assert!(!fits(QuantType::Q8 { block: 32 }, 16, 128));
        assert!(!fits(QuantType::F16, 16, 128));
        assert!(pack(q4, &[0u8; 10], 16, 128).is_none());
        assert!(unpack(q4, &[0u8; 10], 16, 128).is_none());
    }
}
