//! The turn loop both AMX kernels run over one group of 16 rows: at each turn a block's codes
//! are prepared (`Blocks::prepare`: prefetched, and unpacked where the layout needs it), the
//! block `LAG` turns behind runs its tile products into the C tiles of its parity, the block
//! before that has its sums stored, and the one before that is scaled into each token's
//! outputs, in block order. No tile waits on a store just made, and no store on a product
//! just started.

use super::{dpbsud, load, store, zero, SPAN, TOKENS};
use crate::act::QuantActs;
use std::arch::x86_64::*;

/// Bytes of one B tile (16 rows of 64).
pub(crate) const TILE: usize = 1024;

/// How far ahead of the record being prepared the weights are prefetched, in bytes (the
/// hardware prefetcher alone falls behind a pass that computes this long on each record:
/// 8-row passes 23.5 ms without, 19.0 ms at 1 KB, 20.4 at 4 KB, 20.2 at 8 KB).
const AHEAD: usize = 1024;

/// A 64-byte line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [u8; 64]);

/// Where one group's outputs go and how its tokens sit in the tiles.
pub(crate) struct Span {
    /// Where the group's 16 outputs start within each token's `count`.
    pub(crate) col: usize,
    pub(crate) count: usize,
    /// The span's first token.
    pub(crate) t0: usize,
    /// Rows per token tile.
    pub(crate) m: usize,
    /// Token tiles (1 or 2).
    pub(crate) tiles: usize,
}

impl Span {
    /// The spans of row groups `first / 16 ..` covering `count` rows, for the token tiles
    /// `each_span` set up (tokens from `t0`, `tiles` tiles of `m` rows), with each group.
    pub(crate) fn groups(
        first: usize,
        count: usize,
        (t0, m, tiles): (usize, usize, usize),
    ) -> impl Iterator<Item = (usize, Span)> {
        (first / 16..(first + count) / 16).map(move |g| {
            let span = Span {
                col: g * 16 - first,
                count,
                t0,
                m,
                tiles,
            };
            (g, span)
        })
    }
}

/// A layout's blocks as the pipeline needs them.
pub(crate) trait Blocks {
    /// Turns between preparing a block and its products.
    const LAG: usize;
    /// Blocks per row, codes per block.
    fn shape(&self) -> (usize, usize);
    /// Prefetches and prepares block `b` of the group (called in block order).
    ///
    /// # Safety
    /// The group's records are inside the matrix.
    unsafe fn prepare(&mut self, b: usize);
    /// Where block `b`'s B tile rows start (K step k at `k · TILE`) and their stride.
    ///
    /// # Safety
    /// Block `b` was prepared `LAG` turns ago.
    unsafe fn codes(&self, b: usize) -> (*const u8, usize);
    /// Block `e`'s two per-row vectors for [`Blocks::scale`] (scales and offsets).
    ///
    /// # Safety
    /// As [`Blocks::prepare`].
    unsafe fn params(&self, e: usize) -> [__m512; 2];
    /// Adds token `a`'s block `e` (integer sums `d`) to its 16 outputs `acc`, with the VNNI
    /// kernel's operations in its order.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `a` holds block `e`'s scales.
    unsafe fn scale(pr: [__m512; 2], a: &QuantActs, e: usize, d: __m512i, acc: &mut __m512);
}

/// Prefetches record `r`'s `rec` bytes [`AHEAD`] further on.
#[inline(always)]
pub(crate) fn prefetch(r: *const u8, rec: usize) {
    let mut at = AHEAD;
    while at < AHEAD + rec {
        // SAFETY: a prefetch is a hint: it never faults, so the address may pass the matrix.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(r.wrapping_add(at) as *const i8) };
        at += 64;
    }
}

/// Runs one group of 16 rows against the span's tokens.
///
/// # Safety
/// The CPU has AVX-512 F and AMX-INT8 and the process holds the tile state; the tiles are
/// configured for `span.m` rows and the layout's K (`each_span`); `xs` holds `tiles · m`
/// rows of activations, `cols` apart; `ts` are their tokens; the span's outputs lie inside
/// `out`.
#[inline(always)]
pub(crate) unsafe fn run<B: Blocks>(
    blocks: &mut B,
    span: &Span,
    cols: usize,
    xs: &[i8],
    ts: &[QuantActs],
    sums: &mut [Line; 2 * SPAN],
    out: &mut [f32],
) {
    let (nb, block) = blocks.shape();
    let kw = block.min(64);
    let sums = sums.as_mut_ptr() as *mut u8;
    // Sums of block b, token tile j: `TOKENS` lines.
    let sum_at = |b: usize, j: usize| sums.add((b % 2 * 2 + j) * TOKENS * 64);
    let second = span.tiles > 1;
    let a2 = span.m * cols;
    let mut acc = [_mm512_setzero_ps(); SPAN];
    for turn in 0..nb + B::LAG + 2 {
        if turn < nb {
            blocks.prepare(turn);
        }
        let b = turn as isize - B::LAG as isize;
        if (0..nb as isize).contains(&b) {
            let b = b as usize;
            // SAFETY: the A rows are the tokens' activations of this block's K range, `cols`
            // apart inside `xs` (the second tile's `m · cols` further on); the B rows were
            // prepared LAG turns ago; the tiles were configured for these shapes.
            let x = xs.as_ptr().add(b * block) as *const u8;
            let (c, stride) = blocks.codes(b);
            if b & 1 == 0 {
                zero::<0>();
                if second {
                    zero::<6>();
                }
                for k in 0..block / kw {
                    load::<4>(c.add(k * TILE), stride);
                    load::<2>(x.add(k * 64), cols);
                    dpbsud::<0, 2, 4>();
                    if second {
                        load::<2>(x.add(a2 + k * 64), cols);
                        dpbsud::<6, 2, 4>();
                    }
                }
            } else {
                zero::<1>();
                if second {
                    zero::<7>();
                }
                for k in 0..block / kw {
                    load::<5>(c.add(k * TILE), stride);
                    load::<3>(x.add(k * 64), cols);
                    dpbsud::<1, 3, 5>();
                    if second {
                        load::<3>(x.add(a2 + k * 64), cols);
                        dpbsud::<7, 3, 5>();
                    }
                }
            }
        }
        if (1..=nb as isize).contains(&b) {
            // SAFETY: block b − 1's sums into its lines.
            let e = b as usize - 1;
            if e & 1 == 0 {
                store::<0>(sum_at(e, 0), 64);
                if second {
                    store::<6>(sum_at(e, 1), 64);
                }
            } else {
                store::<1>(sum_at(e, 0), 64);
                if second {
                    store::<7>(sum_at(e, 1), 64);
                }
            }
        }
        if (2..=nb as isize + 1).contains(&b) {
            // SAFETY: block e's sums were stored last turn.
            let e = b as usize - 2;
            let pr = blocks.params(e);
            for (t, a) in ts.iter().enumerate() {
                // Token t is row t − m of the second tile when t ≥ m.
                let (j, row) = if t < span.m { (0, t) } else { (1, t - span.m) };
                let d = _mm512_load_si512(sum_at(e, j).add(row * 64) as *const _);
                B::scale(pr, a, e, d, acc.get_unchecked_mut(t));
            }
        }
    }
    for (t, a) in acc.iter().take(ts.len()).enumerate() {
        // SAFETY: 16 outputs of token t0 + t inside `out` (checked by the caller).
        let o = out.as_mut_ptr().add((span.t0 + t) * span.count + span.col);
        _mm512_storeu_ps(o, *a);
    }
}
