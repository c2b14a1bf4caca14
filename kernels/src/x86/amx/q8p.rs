//! The 16-row interleaved Q8 layout (`kernels::q8_packed`) on AMX-INT8. Its codes are stored
//! as unsigned bytes (`q + 128`), lane k of each 64-byte vector holding 4 consecutive codes of
//! row `16g + k`: exactly a B tile's rows, so the tiles load the weights where they lie, with
//! no unpacking. Up to 16 tokens' activations are an A tile; one `tdpbsud` gives every token's
//! 16 integer block sums, and the block ends as in the VNNI kernel, one token at a time, with
//! the same float operations in the same order: each token's outputs are bit for bit those
//! of a one-token step.

use super::pipeline::{self, Blocks, Line, Span};
use super::SPAN;
use crate::act::QuantActs;
use crate::q8_packed::PackedQ8;
use std::arch::x86_64::*;

/// The fewest activation rows worth a tile (`cargo bench --bench kernels -- rows_`: at 4 rows
/// 1.2× VNNI in cache and 1.8× from memory; at 2, even).
pub(crate) const MIN_TOKENS: usize = 4;

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C, FMA, AMX-TILE and AMX-INT8, and the
/// process must hold the tile state (`amx::permitted`); the arguments were checked by
/// `q8_packed::dot_rows_tokens`, and the block is 32 or 64.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let mut sums = [Line([0; 64]); 2 * SPAN];
    super::each_span(
        acts,
        p.cols,
        p.block,
        |a| &a.q,
        |xs, ts, t0, m, tiles| {
            for (g, span) in Span::groups(first, count, (t0, m, tiles)) {
                let mut group = Group {
                    p,
                    base: p.data.as_ptr().add(g * p.blocks() * p.record()),
                };
                pipeline::run(&mut group, &span, p.cols, xs, ts, &mut sums, out);
            }
        },
    );
}

/// One group's records.
struct Group<'a> {
    p: &'a PackedQ8,
    base: *const u8,
}

impl Blocks for Group<'_> {
    const LAG: usize = 0;

    fn shape(&self) -> (usize, usize) {
        (self.p.blocks(), self.p.block)
    }

    #[inline(always)]
    unsafe fn prepare(&mut self, b: usize) {
        pipeline::prefetch(self.base.add(b * self.p.record()), self.p.record());
    }

    #[inline(always)]
    unsafe fn codes(&self, b: usize) -> (*const u8, usize) {
        // The record's `block / 4` code vectors are the B rows.
        (self.base.add(b * self.p.record()), 64)
    }

    #[inline(always)]
    unsafe fn params(&self, e: usize) -> [__m512; 2] {
        // SAFETY: the record ends with the 16 rows' f16 scales.
        let r = self.base.add(e * self.p.record());
        let s = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(self.p.block / 4 * 64) as *const _));
        [s, s]
    }

    #[inline(always)]
    unsafe fn scale(pr: [__m512; 2], a: &QuantActs, e: usize, d: __m512i, acc: &mut __m512) {
        let s = pr[0];
        let sx = _mm512_set1_ps(*a.scale.get_unchecked(e));
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s, sx), *acc);
        let back = _mm512_set1_ps(-128.0 * *a.scaled_sum.get_unchecked(e));
        *acc = _mm512_fmadd_ps(s, back, *acc);
    }
}
