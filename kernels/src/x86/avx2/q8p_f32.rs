//! Packed Q8 rows against one token's f32 activations with AVX2, bit for bit the reference
//! (`w8a16::dot_rows_f32_scalar`): a row's eight consecutive codes (two 4-code lanes of
//! neighbouring code vectors) are widened, converted, multiplied by the block's scale, then
//! by `x`, and added into lane `c mod 8` of one register, the order and the separate
//! roundings of `scalar::dot` over the decoded row. Four rows run side by side, so the adds
//! of one row wait on their own chain only.

use crate::q8_packed::{PackedQ8, GROUP};
use std::arch::x86_64::*;

/// Rows decoded side by side.
const ROWS: usize = 4;

/// # Safety
/// The CPU must support AVX2 and F16C; the arguments were checked by
/// `w8a16::dot_rows_f32` (rows in whole groups, `x` of `cols`, `out` of `count`, a block of
/// whole 8-code runs).
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn dot_rows(
    p: &PackedQ8,
    first: usize,
    count: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let (nb, rec, block, dw) = (p.blocks(), p.record(), p.block, p.block / 4);
    let flip = _mm_set1_epi8(-128);
    for r0 in (first..first + count).step_by(ROWS) {
        // GROUP is a multiple of ROWS: the ROWS rows share a group.
        let (g, k0) = (r0 / GROUP, r0 % GROUP);
        let group = p.data.as_ptr().add(g * nb * rec);
        let mut acc = [_mm256_setzero_ps(); ROWS];
        for b in 0..nb {
            let r = group.add(b * rec);
            // SAFETY: the record's f16 scales follow its dw code vectors; row k0 + j's is
            // entry k0 + j. vcvtph2ps is exact, as `f16::to_f32`.
            let s: [__m256; ROWS] = std::array::from_fn(|j| {
                let h = (r.add(dw * 64 + (k0 + j) * 2) as *const u16).read_unaligned();
                _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))))
            });
            for i in (0..dw).step_by(2) {
                // SAFETY: columns b·block + 4i .. + 8 of x (block is a multiple of 8).
                let xv = _mm256_loadu_ps(x.as_ptr().add(b * block + i * 4));
                for (j, a) in acc.iter_mut().enumerate() {
                    // SAFETY: lane k0 + j of code vectors i and i + 1 of this record.
                    let lo = (r.add(i * 64 + (k0 + j) * 4) as *const i32).read_unaligned();
                    let hi = (r.add(i * 64 + 64 + (k0 + j) * 4) as *const i32).read_unaligned();
                    let q = _mm_xor_si128(_mm_set_epi32(0, 0, hi, lo), flip);
                    let w = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s[j]);
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(w, xv));
                }
            }
        }
        for (j, a) in acc.iter().enumerate() {
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), *a);
            // The same sum as `scalar::dot`'s of its eight lanes.
            out[r0 - first + j] = lanes.iter().sum();
        }
    }
}
