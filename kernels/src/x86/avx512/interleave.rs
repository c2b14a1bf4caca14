//! `kernels::interleave` with AVX-512: one 16-lane gather per output vector.

use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F; `(15·stride + 4·words) <= src.len()`,
/// `dst.len() >= 64·words`, and `15·stride` fits an i32.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn interleave(
    src: &[u8],
    stride: usize,
    words: usize,
    dst: &mut [u8],
    flip: u32,
) {
    let s = stride as i32;
    let idx = _mm512_setr_epi32(
        0,
        s,
        2 * s,
        3 * s,
        4 * s,
        5 * s,
        6 * s,
        7 * s,
        8 * s,
        9 * s,
        10 * s,
        11 * s,
        12 * s,
        13 * s,
        14 * s,
        15 * s,
    );
    let flip = _mm512_set1_epi32(flip as i32);
    for i in 0..words {
        // SAFETY: lane k reads the word at k·stride + 4i, inside `src`; the store is vector i
        // of `dst`.
        let v = _mm512_i32gather_epi32::<1>(idx, src.as_ptr().add(4 * i) as *const _);
        _mm512_storeu_si512(
            dst.as_mut_ptr().add(64 * i) as *mut _,
            _mm512_xor_si512(v, flip),
        );
    }
}
