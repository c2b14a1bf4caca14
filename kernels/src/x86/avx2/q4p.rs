//! The 16-row interleaved Q4 layout (see `kernels::q4_packed`) with AVX2: each 64-byte code
//! vector is two 256-bit halves, rows 0–7 and rows 8–15, taken one half at a time. Without
//! VNNI the integer dot product is `vpmaddubsw` (codes × activations, pairs summed to i16:
//! at most 2·15·127, no saturation) then `vpmaddwd` against ones (to i32). As in the AVX-512
//! kernel there are no horizontal sums and no per-row set-up: a block ends in one
//! multiply-add per token for the 8 rows' scales and one for their zero points. Codes of 5
//! and 6 bits (a GGUF's Q5/Q6 types) take their high-bit planes in with a shift and a mask.

use crate::act::QuantActs;
use crate::q4_packed::{PackedQ4, GROUP};
use std::arch::x86_64::*;

/// Tokens per pass over a half group's weights.
const TOKENS: usize = 4;

/// `$half.$run::<T, HI, VW, TBL>(args)` for the form of `$half`'s matrix: the one list of forms
/// the AVX2 packed kernels compile a loop for (int8 here, f32 in `q4p_f32.rs`), so both take
/// the same forms. `HI`: high-bit planes; `VW`: code vectors per block (block / 8); `TBL`: a
/// value table.
macro_rules! by_form {
    ($half:ident, $run:ident::<$t:ident>, ($($arg:expr),*)) => {{
        let f = $half.p.form;
        match (f.hi_bits, $half.p.block / 8, f.table.is_some()) {
            (0, 2, false) => $half.$run::<$t, 0, 2, false>($($arg),*),
            (0, 4, false) => $half.$run::<$t, 0, 4, false>($($arg),*),
            (0, 8, false) => $half.$run::<$t, 0, 8, false>($($arg),*),
            (0, 16, false) => $half.$run::<$t, 0, 16, false>($($arg),*),
            (0, 2, true) => $half.$run::<$t, 0, 2, true>($($arg),*),
            (0, 4, true) => $half.$run::<$t, 0, 4, true>($($arg),*),
            (0, 8, true) => $half.$run::<$t, 0, 8, true>($($arg),*),
            (0, 16, true) => $half.$run::<$t, 0, 16, true>($($arg),*),
            (1, 2, false) => $half.$run::<$t, 1, 2, false>($($arg),*),
            (1, 4, false) => $half.$run::<$t, 1, 4, false>($($arg),*),
            (2, 2, false) => $half.$run::<$t, 2, 2, false>($($arg),*),
            (2, 4, false) => $half.$run::<$t, 2, 4, false>($($arg),*),
            (hi, vw, tbl) => unreachable!("packed Q4 form: {hi} planes, {vw} vectors, table {tbl}"),
        }
    }};
}
pub(super) use by_form;

/// # Safety
/// The CPU must support AVX2, FMA and F16C; the arguments were checked by
/// `q4_packed::dot_rows_tokens` (row range in whole groups, activations in the matrix's
/// block with chunk 8, output length).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    each_half(p, first, count, acts.len(), |job, nt| {
        let ts = &acts[job.t0..job.t0 + nt];
        // SAFETY: as this function's (the same CPU features; the job's rows and tokens exist).
        unsafe {
            match nt {
                1 => job.run_form::<1>(ts, out),
                2 => job.run_form::<2>(ts, out),
                3 => job.run_form::<3>(ts, out),
                _ => job.run_form::<4>(ts, out),
            }
        }
    });
}

/// Calls `f(job, nt)` for each half group of rows `first..first + count` and each run of up to
/// [`TOKENS`] of the `n` tokens (the W4A16 kernel walks the same way).
pub(super) fn each_half<'a>(
    p: &'a PackedQ4,
    first: usize,
    count: usize,
    n: usize,
    mut f: impl FnMut(&Half<'a>, usize),
) {
    for g in first / GROUP..(first + count) / GROUP {
        for half in 0..2 {
            let mut t0 = 0;
            while t0 < n {
                let nt = TOKENS.min(n - t0);
                let job = Half {
                    p,
                    g,
                    half,
                    col: g * GROUP - first + half * 8,
                    count,
                    t0,
                    stream: t0 == 0 && n <= super::STREAM_ROWS,
                };
                f(&job, nt);
                t0 += nt;
            }
        }
    }
}

/// Eight rows (half a group) against up to four tokens.
pub(super) struct Half<'a> {
    pub(super) p: &'a PackedQ4,
    pub(super) g: usize,
    /// 0: rows 0–7 of the group (bytes 0..32 of each code vector), 1: rows 8–15.
    pub(super) half: usize,
    /// Where the 8 outputs start within each token's `count` outputs.
    pub(super) col: usize,
    pub(super) count: usize,
    pub(super) t0: usize,
    /// The first run of tokens of a pass over at most [`super::STREAM_ROWS`] activation rows
    /// (a decode step, a verification pass, a batch): it reads each record from memory, and
    /// asks for the next group's ahead.
    pub(super) stream: bool,
}

impl Half<'_> {
    /// This half's 8 rows' block scales and `zero − 8·scale` (`−8·scale` when symmetric), from
    /// the record at `r`.
    ///
    /// # Safety
    /// AVX2 and F16C; `r` is a record of this half's group.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn params(&self, r: *const u8) -> (__m256, __m256) {
        // SAFETY: the record ends with the 16 rows' parameters (zeros, then scales when
        // asymmetric; f16, or f32 when wide); this half's 8 start 8 entries in for the second.
        let p = self.p;
        let per = if p.form.wide { 4 } else { 2 };
        let pr = r.add(p.params_at() + self.half * 8 * per);
        let load = |at: usize| {
            if p.form.wide {
                _mm256_loadu_ps(pr.add(at * 2) as *const f32)
            } else {
                _mm256_cvtph_ps(_mm_loadu_si128(pr.add(at) as *const _))
            }
        };
        let off = p.form.offset as f32;
        if p.sym {
            let s = load(0);
            (s, _mm256_mul_ps(s, _mm256_set1_ps(-off)))
        } else {
            let (z, s) = (load(0), load(32));
            (s, _mm256_fnmadd_ps(_mm256_set1_ps(off), s, z))
        }
    }

    /// Picks the kernel made for this matrix's form: the code vectors per block (`VW`), the
    /// high-bit planes (`HI`) and a value table (`TBL`) are constants in each, so the loops
    /// over a block's vectors unroll, every plane shift is an immediate, and nothing but the
    /// arithmetic is left in the block loop (with them read at run time, a Q5 block spent more
    /// on scalar shift counts and branches than on its dot products: 6 GB/s a core, not 12).
    ///
    /// # Safety
    /// As [`dot_rows_tokens`]; `T == ts.len()`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_form<const T: usize>(&self, ts: &[QuantActs], out: &mut [f32]) {
        // SAFETY: as this function's; `by_form!` passes the matrix's form as the constants.
        by_form!(self, run::<T>, (ts, out))
    }

    /// # Safety
    /// As [`dot_rows_tokens`]; `T == ts.len()`; `HI`, `VW` (= block / 8) and `TBL` are the
    /// matrix's form.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run<const T: usize, const HI: usize, const VW: usize, const TBL: bool>(
        &self,
        ts: &[QuantActs],
        out: &mut [f32],
    ) {
        let p = self.p;
        let (nb, rec, block) = (p.blocks(), p.record(), p.block);
        debug_assert!(p.form.hi_bits as usize == HI && block == VW * 8);
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        // Each token's arrays, read once here rather than through `ts` in the loops.
        let perm: [*const i8; T] = std::array::from_fn(|t| ts[t].perm.as_ptr());
        let scale: [*const f32; T] = std::array::from_fn(|t| ts[t].scale.as_ptr());
        let ssum: [*const f32; T] = std::array::from_fn(|t| ts[t].scaled_sum.as_ptr());
        let mask = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        // A non-uniform form's table, as signed bytes in both 128-bit lanes.
        let table = match p.form.table {
            // SAFETY: `t` holds 16 bytes.
            Some(t) if TBL => _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const _)),
            _ => _mm256_setzero_si256(),
        };
        let group = p.data.as_ptr().add(self.g * nb * rec);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let r = group.add(b * rec);
            if self.stream && self.half == 0 {
                super::prefetch_record(r, nb * rec, rec);
            }
            // This half of the block's high-bit plane vectors (HI·VW/4 of them: at most 2).
            let mut planes = [_mm256_setzero_si256(); 2];
            for (k, pl) in planes.iter_mut().enumerate().take((HI * VW).div_ceil(4)) {
                // SAFETY: plane vector k of this record, after its VW code vectors.
                *pl = _mm256_loadu_si256(r.add((VW + k) * 64 + self.half * 32) as *const _);
            }
            // `16 << pl` in each byte whose plane-`pl` bit for code vector `i`, nibble half `h`
            // (0: the high nibbles) is set. The bit's place is a constant once the loops
            // unroll: a 16-bit shift by at most 4 left or 3 right brings no bit across a byte
            // for the mask to keep.
            let high = |i: usize, h: usize| {
                let mut out = _mm256_setzero_si256();
                for pl in 0..HI {
                    let bit = pl * 2 * VW + 2 * i + h;
                    let (from, to) = ((bit % 8) as i32, 4 + pl as i32);
                    let plane = planes[bit / 8];
                    let moved = if from <= to {
                        _mm256_sll_epi16(plane, _mm_cvtsi32_si128(to - from))
                    } else {
                        _mm256_srl_epi16(plane, _mm_cvtsi32_si128(from - to))
                    };
                    out = _mm256_or_si256(out, _mm256_and_si256(moved, _mm256_set1_epi8(1 << to)));
                }
                out
            };
            let mut d = [_mm256_setzero_si256(); T];
            // Two code vectors per step: their four `vpmaddubsw` sums still fit i16 (at most
            // 4·2·15·127 = 15,240, or 31,496 for 5-bit codes), so one `vpmaddwd` widens both.
            for i in (0..VW).step_by(2) {
                // SAFETY: half `half` of code vectors i and i + 1 of this record (VW is
                // even), inside the group's data.
                let v0 = _mm256_loadu_si256(r.add(i * 64 + self.half * 32) as *const _);
                let v1 = _mm256_loadu_si256(r.add(i * 64 + 64 + self.half * 32) as *const _);
                let (mut hi0, mut lo0) = (
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v0), mask),
                    _mm256_and_si256(v0, mask),
                );
                let (mut hi1, mut lo1) = (
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v1), mask),
                    _mm256_and_si256(v1, mask),
                );
                if HI > 0 {
                    hi0 = _mm256_or_si256(hi0, high(i, 0));
                    lo0 = _mm256_or_si256(lo0, high(i, 1));
                    hi1 = _mm256_or_si256(hi1, high(i + 1, 0));
                    lo1 = _mm256_or_si256(lo1, high(i + 1, 1));
                }
                if TBL {
                    // Signed values: `vpmaddubsw` takes |w| and x with w's sign, whose pair
                    // sums (at most 2·127·127) fit its 16 bits; each is widened alone.
                    let w = [hi0, lo0, hi1, lo1].map(|c| _mm256_shuffle_epi8(table, c));
                    let mag = w.map(|w| _mm256_abs_epi8(w));
                    for t in 0..T {
                        // SAFETY: as below.
                        let x = perm[t].add(b * block + i * 8) as *const i32;
                        let mut sum = d[t];
                        for k in 0..4 {
                            let xk = _mm256_set1_epi32(x.add(k).read_unaligned());
                            let prod = _mm256_maddubs_epi16(mag[k], _mm256_sign_epi8(xk, w[k]));
                            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(prod, ones));
                        }
                        d[t] = sum;
                    }
                    continue;
                }
                for t in 0..T {
                    // SAFETY: this block's activations, 8 per code dword, inside token t's.
                    let x = perm[t].add(b * block + i * 8) as *const i32;
                    let x0 = _mm256_set1_epi32(x.read_unaligned());
                    let x1 = _mm256_set1_epi32(x.add(1).read_unaligned());
                    let x2 = _mm256_set1_epi32(x.add(2).read_unaligned());
                    let x3 = _mm256_set1_epi32(x.add(3).read_unaligned());
                    let s0 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(hi0, x0),
                        _mm256_maddubs_epi16(lo0, x1),
                    );
                    let s1 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(hi1, x2),
                        _mm256_maddubs_epi16(lo1, x3),
                    );
                    // 6-bit codes: the two pairs' `vpmaddubsw` sums reach 2·2·63·127 = 32,004
                    // each, so each pair is widened on its own.
                    let sum = if HI == 2 {
                        _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones))
                    } else {
                        _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones)
                    };
                    d[t] = _mm256_add_epi32(d[t], sum);
                }
            }
            let (s, m) = self.params(r);
            for t in 0..T {
                // SAFETY: block b's entries of token t's per-block arrays.
                let sx = _mm256_set1_ps(*scale[t].add(b));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[t]), _mm256_mul_ps(s, sx), acc[t]);
                let xs = _mm256_set1_ps(*ssum[t].add(b));
                acc[t] = _mm256_fmadd_ps(m, xs, acc[t]);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            // SAFETY: 8 outputs of token t0 + t inside `out` (checked by the caller).
            let o = out.as_mut_ptr().add((self.t0 + t) * self.count + self.col);
            _mm256_storeu_ps(o, *a);
        }
    }
}
