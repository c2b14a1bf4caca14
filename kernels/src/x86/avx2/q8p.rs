//! The 16-row interleaved Q8 layout (see `kernels::q8_packed`) with AVX2, half a group (8
//! rows, 32 bytes of each code vector) at a time. `vpmaddubsw` wants an unsigned operand, and
//! the stored `q + 128` against a signed activation could overflow its i16 pair sums, so
//! the codes are turned back to signed (`^ 0x80`) and multiplied as `|q| · (x · sign q)`:
//! pair sums at most 2·128·127, exact. Then `vpmaddwd` against ones widens to i32; a block
//! ends in one multiply-add per token for the 8 rows' scales.

use crate::act::QuantActs;
use crate::q8_packed::{PackedQ8, GROUP};
use std::arch::x86_64::*;

const TOKENS: usize = 4;

/// # Safety
/// The CPU must support AVX2, FMA and F16C; the arguments were checked by
/// `q8_packed::dot_rows_tokens`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    for g in first / GROUP..(first + count) / GROUP {
        for half in 0..2 {
            let mut t0 = 0;
            while t0 < acts.len() {
                let nt = TOKENS.min(acts.len() - t0);
                let ts = &acts[t0..t0 + nt];
                let col = g * GROUP - first + half * 8;
                // A few tokens' pass streams the weights: ask for the next group ahead (see
                // `super::prefetch_record`).
                let prefetch = half == 0 && t0 == 0 && acts.len() <= super::STREAM_ROWS;
                let at = (p, g, half, count, col, t0, prefetch);
                match nt {
                    1 => run::<1>(at, ts, out),
                    2 => run::<2>(at, ts, out),
                    3 => run::<3>(at, ts, out),
                    _ => run::<4>(at, ts, out),
                }
                t0 += nt;
            }
        }
    }
}

/// Half `half` of group `g` against `T` tokens; outputs at column `col` of each token's
/// `count`, tokens from `t0`; with `prefetch`, the next group's records are asked for.
///
/// # Safety
/// As [`dot_rows_tokens`]; `T == ts.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<const T: usize>(
    (p, g, half, count, col, t0, prefetch): (&PackedQ8, usize, usize, usize, usize, usize, bool),
    ts: &[QuantActs],
    out: &mut [f32],
) {
    let (nb, rec, block) = (p.blocks(), p.record(), p.block);
    let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
    let flip = _mm256_set1_epi8(-128);
    let ones = _mm256_set1_epi16(1);
    let group = p.data.as_ptr().add(g * nb * rec);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let r = group.add(b * rec);
        if prefetch {
            super::prefetch_record(r, nb * rec, rec);
        }
        let mut d = [_mm256_setzero_si256(); T];
        for i in 0..block / 4 {
            // SAFETY: half `half` of code vector i of this record, inside the group's data.
            let w = _mm256_xor_si256(
                _mm256_loadu_si256(r.add(i * 64 + half * 32) as *const _),
                flip,
            );
            // |q| as the unsigned operand: a code of −128 (possible in a GGUF's Q8_0) is 128
            // there, where negating it would wrap.
            let wa = _mm256_abs_epi8(w);
            for (t, a) in ts.iter().enumerate() {
                // SAFETY: activations 4i..4i + 4 of this block, inside token t's.
                let x = _mm256_set1_epi32(
                    (a.q.as_ptr().add(b * block + i * 4) as *const i32).read_unaligned(),
                );
                let prod = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, w));
                d[t] = _mm256_add_epi32(d[t], _mm256_madd_epi16(prod, ones));
            }
        }
        // SAFETY: the record ends with the 16 rows' f16 scales; this half's 8 from byte 16.
        let s = _mm256_cvtph_ps(_mm_loadu_si128(
            r.add(block / 4 * 64 + half * 16) as *const _
        ));
        for (t, a) in ts.iter().enumerate() {
            let sx = _mm256_set1_ps(*a.scale.get_unchecked(b));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[t]), _mm256_mul_ps(s, sx), acc[t]);
        }
    }
    for (t, a) in acc.iter().enumerate() {
        // SAFETY: 8 outputs of token t0 + t inside `out` (checked by the caller).
        _mm256_storeu_ps(out.as_mut_ptr().add((t0 + t) * count + col), *a);
    }
}
