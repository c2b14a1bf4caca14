//! The 16-row interleaved Q4 layout (`kernels::q4_packed`) on AMX-INT8: for each group of 16
//! rows and each block, the codes are unpacked to unsigned bytes exactly as the VNNI kernel
//! unpacks them and stored as one B tile (a row per 4 codes of the 16 rows); up to 16 tokens'
//! activations, in the same permuted order, are the A tile; one `tdpbsud` gives every token's
//! 16 integer block sums. The block then ends as in the VNNI kernel, one token at a time, with
//! the same float operations in the same order: each token's outputs are bit for bit those
//! of a one-token step.

use super::super::avx512::q4p::{add_high_bits, block_params, unsigned_table};
use super::pipeline::{self, Blocks, Line, Span, TILE};
use super::SPAN;
use crate::act::QuantActs;
use crate::q4_packed::PackedQ4;
use std::arch::x86_64::*;

/// The fewest activation rows (tokens × digits) worth a tile: below, the VNNI kernel's
/// four-token tiles cost less than a tile's fixed work per block (unpacking the codes to
/// memory and loading them as a B tile). `cargo bench --bench kernels -- rows_`, one thread:
/// at 4 rows AMX is 0.75–0.83× VNNI, at 8 rows 1.14–1.30×, at 16 rows 1.57–1.77×.
pub(crate) const MIN_TOKENS: usize = 8;

/// The largest block this kernel takes (two B tiles per block).
pub(crate) const MAX_BLOCK: usize = 128;

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C, FMA, AMX-TILE and AMX-INT8, and the
/// process must hold the tile state (`amx::permitted`); the arguments were checked by
/// `q4_packed::dot_rows_tokens` (row range in whole groups, activations in the matrix's block
/// with chunk 8, output length), and `16 <= p.block <= MAX_BLOCK`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let kw = p.block.min(64);
    RING.with(|ring| {
        let ring = &mut *ring.borrow_mut();
        super::each_span(
            acts,
            p.cols,
            kw,
            |a| &a.perm,
            |xs, ts, t0, m, tiles| {
                for (g, span) in Span::groups(first, count, (t0, m, tiles)) {
                    let mut group = Group {
                        p,
                        base: p.data.as_ptr().add(g * p.blocks() * p.record()),
                        codes: &mut ring.codes,
                        mask: _mm512_set1_epi8(0x0F),
                        table: unsigned_table(p),
                    };
                    pipeline::run(&mut group, &span, p.cols, xs, ts, &mut ring.sums, out);
                }
            },
        );
    });
}

/// Blocks of unpacked codes in flight: block `b` is unpacked [`Group::LAG`] blocks before its
/// tiles load it, so no tile load waits on the stores just made.
const SLOTS: usize = 4;

/// A ring of unpacked blocks (B tiles, up to two K steps each) and two blocks' integer sums.
struct Ring {
    codes: [Line; SLOTS * 2 * TILE / 64],
    sums: [Line; 2 * SPAN],
}

thread_local! {
    /// Each pool thread's ring, kept between calls.
    static RING: std::cell::RefCell<Box<Ring>> = std::cell::RefCell::new(Box::new(Ring {
        codes: [Line([0; 64]); SLOTS * 2 * TILE / 64],
        sums: [Line([0; 64]); 2 * SPAN],
    }));
}

/// One group's records, and the ring its blocks are unpacked into.
struct Group<'a> {
    p: &'a PackedQ4,
    base: *const u8,
    codes: &'a mut [Line; SLOTS * 2 * TILE / 64],
    mask: __m512i,
    table: Option<__m512i>,
}

impl Group<'_> {
    fn slot(&self, b: usize) -> *const u8 {
        self.codes[b % SLOTS * 2 * TILE / 64..].as_ptr() as *const u8
    }
}

impl Blocks for Group<'_> {
    const LAG: usize = 2;

    fn shape(&self) -> (usize, usize) {
        (self.p.blocks(), self.p.block)
    }

    /// Unpacks block `b`'s codes as the VNNI kernel does and stores them as B rows: code
    /// vector i's high nibbles as row 2i, its low nibbles as row 2i + 1.
    #[inline(always)]
    unsafe fn prepare(&mut self, b: usize) {
        let p = self.p;
        let r = self.base.add(b * p.record());
        pipeline::prefetch(r, p.record());
        let c = self.slot(b) as *mut u8;
        for i in 0..p.block / 8 {
            // SAFETY: code vector i of this record lies inside the group's data.
            let v = _mm512_loadu_si512(r.add(i * 64) as *const _);
            let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), self.mask);
            let mut lo = _mm512_and_si512(v, self.mask);
            if p.form.hi_bits > 0 {
                add_high_bits(p, r, i, &mut hi, &mut lo);
            }
            if let Some(t) = self.table {
                hi = _mm512_shuffle_epi8(t, hi);
                lo = _mm512_shuffle_epi8(t, lo);
            }
            // SAFETY: B rows 2i and 2i + 1 of the slot (block / 4 rows of 64 bytes).
            _mm512_store_si512(c.add(2 * i * 64) as *mut _, hi);
            _mm512_store_si512(c.add((2 * i + 1) * 64) as *mut _, lo);
        }
    }

    #[inline(always)]
    unsafe fn codes(&self, b: usize) -> (*const u8, usize) {
        (self.slot(b), 64)
    }

    #[inline(always)]
    unsafe fn params(&self, e: usize) -> [__m512; 2] {
        let p = self.p;
        // SAFETY: block e's record ends with the 16 rows' parameters.
        let r = self.base.add(e * p.record() + p.params_at());
        let (s, m) = block_params(r, p, p.form.unsigned_offset());
        [s, m]
    }

    #[inline(always)]
    unsafe fn scale(pr: [__m512; 2], a: &QuantActs, e: usize, d: __m512i, acc: &mut __m512) {
        let [s, m] = pr;
        let sx = _mm512_set1_ps(*a.scale.get_unchecked(e));
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s, sx), *acc);
        let xsum = _mm512_set1_ps(*a.scaled_sum.get_unchecked(e));
        *acc = _mm512_fmadd_ps(m, xsum, *acc);
    }
}
