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
                1 => job.run::<1>(ts, out),
                2 => job.run::<2>(ts, out),
                3 => job.run::<3>(ts, out),
                _ => job.run::<4>(ts, out),
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

    /// The high-bit planes' contribution to this half of code vector `i`'s nibble half `h`
    /// (0: the high nibbles): `16 << p` in each byte whose plane-`p` bit is set.
    ///
    /// # Safety
    /// AVX2; `r` is a record of this half's group.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn high_bits(&self, r: *const u8, i: usize, h: usize) -> __m256i {
        let p = self.p;
        let vw = p.block / 8;
        let mut out = _mm256_setzero_si256();
        for pl in 0..p.form.hi_bits as usize {
            let bit = pl * 2 * vw + 2 * i + h;
            // SAFETY: plane vector bit / 8 lies inside the record's high-bit planes.
            let plane = _mm256_loadu_si256(r.add((vw + bit / 8) * 64 + self.half * 32) as *const _);
            // Move bit `bit % 8` of every byte to bit 4 + pl of the same byte: a 16-bit shift
            // by at most 4 left or 3 right brings no bit across a byte for the mask to keep.
            let (from, to) = ((bit % 8) as i32, 4 + pl as i32);
            let moved = if from <= to {
                _mm256_sll_epi16(plane, _mm_cvtsi32_si128(to - from))
            } else {
                _mm256_srl_epi16(plane, _mm_cvtsi32_si128(from - to))
            };
            out = _mm256_or_si256(out, _mm256_and_si256(moved, _mm256_set1_epi8(1 << to)));
        }
        out
    }

    /// # Safety
    /// As [`dot_rows_tokens`]; `T == ts.len()`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run<const T: usize>(&self, ts: &[QuantActs], out: &mut [f32]) {
        let p = self.p;
        let (nb, rec, block) = (p.blocks(), p.record(), p.block);
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        let mask = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        // A non-uniform form's table, as signed bytes in both 128-bit lanes.
        let table = p.form.table.map(|t| {
            // SAFETY: `t` holds 16 bytes.
            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const _))
        });
        let group = p.data.as_ptr().add(self.g * nb * rec);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let r = group.add(b * rec);
            let mut d = [_mm256_setzero_si256(); T];
            // Two code vectors per step: their four `vpmaddubsw` sums still fit i16 (at most
            // 4·2·15·127 = 15,240, or 31,496 for 5-bit codes), so one `vpmaddwd` widens both.
            for i in (0..block / 8).step_by(2) {
                // SAFETY: half `half` of code vectors i and i + 1 of this record (block/8 is
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
                if p.form.hi_bits > 0 {
                    hi0 = _mm256_or_si256(hi0, self.high_bits(r, i, 0));
                    lo0 = _mm256_or_si256(lo0, self.high_bits(r, i, 1));
                    hi1 = _mm256_or_si256(hi1, self.high_bits(r, i + 1, 0));
                    lo1 = _mm256_or_si256(lo1, self.high_bits(r, i + 1, 1));
                }
                // 6-bit codes: the two pairs' `vpmaddubsw` sums reach 2·2·63·127 = 32,004
                // each, so each pair is widened on its own.
                let wide = p.form.hi_bits == 2;
                if let Some(tbl) = table {
                    // Signed values: `vpmaddubsw` takes |w| and x with w's sign, whose pair
                    // sums (at most 2·127·127) fit its 16 bits; each is widened alone.
                    let w = [hi0, lo0, hi1, lo1].map(|c| _mm256_shuffle_epi8(tbl, c));
                    let mag = w.map(|w| _mm256_abs_epi8(w));
                    for (t, a) in ts.iter().enumerate() {
                        // SAFETY: as below.
                        let x = a.perm.as_ptr().add(b * block + i * 8) as *const i32;
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
                for (t, a) in ts.iter().enumerate() {
                    // SAFETY: this block's activations, 8 per code dword, inside token t's.
                    let x = a.perm.as_ptr().add(b * block + i * 8) as *const i32;
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
                    let sum = if wide {
                        _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones))
                    } else {
                        _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones)
                    };
                    d[t] = _mm256_add_epi32(d[t], sum);
                }
            }
            let (s, m) = self.params(r);
            for (t, a) in ts.iter().enumerate() {
                let sx = _mm256_set1_ps(*a.scale.get_unchecked(b));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[t]), _mm256_mul_ps(s, sx), acc[t]);
                let xs = _mm256_set1_ps(*a.scaled_sum.get_unchecked(b));
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
