//! The transpose behind the 16-row packed layouts (`q4_packed`, `q8_packed`): 32-bit words of
//! 16 rows, interleaved so that vector `i` holds word `i` of every row. Run once per matrix
//! at load, it is most of the packing time, so it has an AVX-512 gather version.

use super::Cpu;
#[cfg(target_arch = "x86_64")]
use super::Isa;

/// Rows per interleaved group (the lanes of a 512-bit vector of 32-bit words).
pub const GROUP: usize = pocket_formats::quant::rows16::GROUP;

/// The bytes of a packed matrix: repacked at load (a file in the row-major layout) or mapped
/// straight from a `.pocket` file that stores the `rows16` layout (no copy, no load work).
pub enum PackedBytes {
    Owned(Vec<u8>),
    /// A packed copy in huge-page memory (see [`PackedBytes::zeroed`]).
    Anon(pocket_formats::bytes::ArenaBytes),
    Mapped(pocket_formats::bytes::ByteView),
}

impl PackedBytes {
    /// `len` zero bytes to pack into, in huge-page memory (`ArenaBytes`); a `Vec` only if the
    /// system refuses the mapping.
    pub fn zeroed(len: usize) -> PackedBytes {
        match pocket_formats::bytes::ArenaBytes::zeroed(len) {
            Ok(b) => PackedBytes::Anon(b),
            Err(_) => PackedBytes::Owned(vec![0u8; len]),
        }
    }

    /// The bytes to fill (a packed copy; mapped bytes are read-only).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            PackedBytes::Owned(v) => v,
            PackedBytes::Anon(b) => b,
            PackedBytes::Mapped(_) => panic!("mapped packed bytes are read-only"),
        }
    }

    /// Mapped bytes of a `[rows, cols]` `dtype` matrix stored in the `rows16` layout; `None`
    /// when the layout does not take that type and shape or the length is not its size.
    pub fn mapped(
        data: pocket_formats::bytes::ByteView,
        dtype: pocket_formats::quant::QuantType,
        rows: usize,
        cols: usize,
    ) -> Option<PackedBytes> {
        (pocket_formats::quant::rows16::fits(dtype, rows, cols)
            && dtype.byte_size(rows, cols) == Some(data.len()))
        .then_some(PackedBytes::Mapped(data))
    }
}

impl std::ops::Deref for PackedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            PackedBytes::Owned(v) => v,
            PackedBytes::Anon(b) => b,
            PackedBytes::Mapped(m) => m.as_slice(),
        }
    }
}

/// For `i` in `0..words`, `k` in `0..16`: dst word `16·i + k` = src word `i` of row `k`, that
/// is the 4 bytes at `src[k·stride + 4·i..]`, xor `flip`. `dst` holds `64·words` bytes.
pub fn interleave(cpu: Cpu, src: &[u8], stride: usize, words: usize, dst: &mut [u8], flip: u32) {
    assert!(dst.len() >= 64 * words);
    assert!(words == 0 || (GROUP - 1) * stride + 4 * words <= src.len());
    #[cfg(target_arch = "x86_64")]
    if cpu.has(Isa::Avx512) && stride <= i32::MAX as usize / GROUP {
        // SAFETY: AVX-512 F is present (the `Cpu` token proves it); every gathered word lies inside
        // `src` and every stored vector inside `dst` (asserted above), and the row offsets fit
        // the gather's 32-bit indices.
        return unsafe {
            super::x86::avx512::interleave::interleave(src, stride, words, dst, flip)
        };
    }
    let _ = cpu; // aarch64 repacks with the scalar twin (load time only)
    interleave_scalar(src, stride, words, dst, flip)
}

/// The scalar twin.
pub fn interleave_scalar(src: &[u8], stride: usize, words: usize, dst: &mut [u8], flip: u32) {
    for k in 0..GROUP {
        let row = &src[k * stride..][..4 * words];
        for (i, c) in row.chunks_exact(4).enumerate() {
            let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) ^ flip;
            dst[i * 64 + k * 4..][..4].copy_from_slice(&v.to_ne_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn every_isa_matches_the_scalar_twin() {
        let mut rng = Rng(23);
        for &(stride, words) in &[(32, 8), (448, 8), (1280, 16), (100, 3)] {
            let src: Vec<u8> = (0..GROUP * stride + 7)
                .map(|_| rng.next_u32() as u8)
                .collect();
            let mut want = vec![0u8; 64 * words];
            interleave_scalar(&src[3..], stride, words, &mut want, 0x8080_8080);
            assert_eq!(
                &want[4..8],
                &(u32::from_ne_bytes(src[3 + stride..][..4].try_into().unwrap()) ^ 0x8080_8080)
                    .to_ne_bytes()
            );
            for isa in crate::available() {
                let mut got = vec![0u8; 64 * words];
                interleave(isa, &src[3..], stride, words, &mut got, 0x8080_8080);
                assert_eq!(got, want, "{isa:?}");
            }
        }
    }
}
