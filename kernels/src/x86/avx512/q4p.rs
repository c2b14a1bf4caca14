//! The 16-row interleaved Q4 layout (see `kernels::q4_packed`) with AVX-512 VNNI: per block,
//! `block/8` code vectors cover 16 rows; each `vpdpbusd` takes one broadcast activation dword,
//! and a block ends in one multiply-add per token for its scales and one for its zero points.

use crate::act::QuantActs;
use crate::q4_packed::{PackedQ4, GROUP};
use std::arch::x86_64::*;

/// Tokens per pass over a group's weights.
const TOKENS: usize = 4;

/// How far ahead of the record being read (in bytes of the same row group's stream) the first
/// tile of tokens prefetches. A pass over several tokens computes long enough on each record
/// that the hardware prefetcher falls behind: without it the weights arrive only when asked for.
const AHEAD: usize = 4096;

/// Prefetches record `r`'s bytes `AHEAD` further on (a prefetch never faults, so the address
/// may lie past the matrix: it is only computed, with `wrapping_add`).
#[inline(always)]
fn prefetch_ahead(r: *const u8, rec: usize) {
    let mut at = 0;
    while at < rec {
        // SAFETY: a prefetch is a hint; it reads nothing the program sees and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(r.wrapping_add(AHEAD + at) as *const i8) };
        at += 64;
    }
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C and FMA; the arguments were checked by
/// `q4_packed::dot_rows_tokens` (row range in whole groups, activations in the matrix's
/// block with chunk 8, output length).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ4,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let (mut g, end) = (first / GROUP, (first + count) / GROUP);
    while g < end {
        // Two groups at once when a full tile of tokens is there: each broadcast activation
        // then feeds two `vpdpbusd`, halving the broadcasts per multiply-add (prefill).
        let pair = g + 1 < end && acts.len() >= TOKENS;
        let tile = even_tile(acts.len());
        let mut t0 = 0;
        while t0 < acts.len() {
            let nt = tile.min(acts.len() - t0);
            let ts = &acts[t0..t0 + nt];
            for g in g..g + if pair && nt < TOKENS { 2 } else { 1 } {
                let job = Group {
                    p,
                    g,
                    col: g * GROUP - first,
                    count,
                    t0,
                };
                if pair && nt == TOKENS {
                    match p.block {
                        16 => job.run_pair::<2>(ts, out),
                        32 => job.run_pair::<4>(ts, out),
                        _ => job.run_pair::<8>(ts, out),
                    }
                    continue;
                }
                match (p.block, nt) {
                    (16, 1) => job.run::<2, 1, 4>(ts, out),
                    (16, 2) => job.run::<2, 2, 2>(ts, out),
                    (16, 3) => job.run::<2, 3, 1>(ts, out),
                    (16, _) => job.run::<2, 4, 1>(ts, out),
                    (32, 1) => job.run::<4, 1, 4>(ts, out),
                    (32, 2) => job.run::<4, 2, 2>(ts, out),
                    (32, 3) => job.run::<4, 3, 1>(ts, out),
                    (32, _) => job.run::<4, 4, 1>(ts, out),
                    (_, 1) => job.run::<8, 1, 4>(ts, out),
                    (_, 2) => job.run::<8, 2, 2>(ts, out),
                    (_, 3) => job.run::<8, 3, 1>(ts, out),
                    _ => job.run::<8, 4, 1>(ts, out),
                }
            }
            t0 += nt;
        }
        g += if pair { 2 } else { 1 };
    }
}

/// Tokens per tile for `n` tokens: as few tiles of at most [`TOKENS`] as hold them, as even as
/// they go (6 tokens: 3 + 3 rather than 4 + 2, whose 2-token tile costs nearly as much as a
/// full one). Tiles change no bits: each token's sums run in the same order in any tile.
pub(super) fn even_tile(n: usize) -> usize {
    n.div_ceil(n.div_ceil(TOKENS).max(1)).max(1)
}

/// One group of 16 rows against up to four tokens (also the W4A16 kernel's unit of work).
pub(super) struct Group<'a> {
    pub(super) p: &'a PackedQ4,
    pub(super) g: usize,
    /// Where the group's 16 outputs start within each token's `count` outputs.
    pub(super) col: usize,
    pub(super) count: usize,
    pub(super) t0: usize,
}

impl Group<'_> {
    /// `DW` code vectors per pass (a block of 128 takes two passes of 8), `T` tokens, `C`
    /// independent integer accumulators per token (so one token's `vpdpbusd` chain does not
    /// wait on its own latency).
    ///
    /// # Safety
    /// As [`dot_rows_tokens`]; `T == ts.len()`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    unsafe fn run<const DW: usize, const T: usize, const C: usize>(
        &self,
        ts: &[QuantActs],
        out: &mut [f32],
    ) {
        let p = self.p;
        let (nb, rec, block) = (p.blocks(), p.record(), p.block);
        let passes = block / 8 / DW;
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        let mask = _mm512_set1_epi8(0x0F);
        let table = unsigned_table(p);
        let base = p.data.as_ptr().add(self.g * nb * rec);
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..nb {
            let r = base.add(b * rec);
            if self.t0 == 0 {
                prefetch_ahead(r, rec);
            }
            let mut d = [[_mm512_setzero_si512(); C]; T];
            for pass in 0..passes {
                let mut hi = [_mm512_setzero_si512(); DW];
                let mut lo = [_mm512_setzero_si512(); DW];
                for i in 0..DW {
                    // SAFETY: vector pass·DW + i of this record lies inside the group's data.
                    let v = _mm512_loadu_si512(r.add((pass * DW + i) * 64) as *const _);
                    hi[i] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
                    lo[i] = _mm512_and_si512(v, mask);
                    if p.form.hi_bits > 0 {
                        add_high_bits(p, r, pass * DW + i, &mut hi[i], &mut lo[i]);
                    }
                    if let Some(t) = table {
                        hi[i] = _mm512_shuffle_epi8(t, hi[i]);
                        lo[i] = _mm512_shuffle_epi8(t, lo[i]);
                    }
                }
                for (t, a) in ts.iter().enumerate() {
                    // SAFETY: this block's activations, 8 per code dword, inside token t's.
                    let x = a.perm.as_ptr().add(b * block + pass * DW * 8);
                    for i in 0..DW {
                        let xe = _mm512_set1_epi32((x.add(i * 8) as *const i32).read_unaligned());
                        let xo =
                            _mm512_set1_epi32((x.add(i * 8 + 4) as *const i32).read_unaligned());
                        let c = (2 * i) % C;
                        d[t][c] = _mm512_dpbusd_epi32(d[t][c], hi[i], xe);
                        let c = (2 * i + 1) % C;
                        d[t][c] = _mm512_dpbusd_epi32(d[t][c], lo[i], xo);
                    }
                }
            }
            // SAFETY: the record ends with the 16 rows' parameters.
            let (s, m) = block_params(r.add(p.params_at()), p, p.form.unsigned_offset());
            for (t, a) in ts.iter().enumerate() {
                let mut dt = d[t][0];
                for c in 1..C {
                    dt = _mm512_add_epi32(dt, d[t][c]);
                }
                let sx = _mm512_set1_ps(*a.scale.get_unchecked(b));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dt), _mm512_mul_ps(s, sx), acc[t]);
                let xs = _mm512_set1_ps(*a.scaled_sum.get_unchecked(b));
                acc[t] = _mm512_fmadd_ps(m, xs, acc[t]);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            // SAFETY: 16 outputs of token t0 + t inside `out` (checked by the caller).
            let o = out.as_mut_ptr().add((self.t0 + t) * self.count + self.col);
            _mm512_storeu_ps(o, *a);
        }
    }
    /// Groups `g` and `g + 1` against four tokens, `DW` code vectors per pass.
    ///
    /// # Safety
    /// As [`dot_rows_tokens`]; `ts.len() == 4` and group `g + 1` is inside the row range.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    unsafe fn run_pair<const DW: usize>(&self, ts: &[QuantActs], out: &mut [f32]) {
        const T: usize = TOKENS;
        let p = self.p;
        let (nb, rec, block) = (p.blocks(), p.record(), p.block);
        let passes = block / 8 / DW;
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        let mask = _mm512_set1_epi8(0x0F);
        let table = unsigned_table(p);
        let base = [
            p.data.as_ptr().add(self.g * nb * rec),
            p.data.as_ptr().add((self.g + 1) * nb * rec),
        ];
        let mut acc = [[_mm512_setzero_ps(); 2]; T];
        for b in 0..nb {
            let r = base.map(|g| g.add(b * rec));
            if self.t0 == 0 {
                prefetch_ahead(r[0], rec);
                prefetch_ahead(r[1], rec);
            }
            let mut d = [[_mm512_setzero_si512(); 2]; T];
            for pass in 0..passes {
                for i in 0..DW {
                    let mut hi = [_mm512_setzero_si512(); 2];
                    let mut lo = [_mm512_setzero_si512(); 2];
                    for k in 0..2 {
                        // SAFETY: vector pass·DW + i of this record of group g + k.
                        let v = _mm512_loadu_si512(r[k].add((pass * DW + i) * 64) as *const _);
                        hi[k] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
                        lo[k] = _mm512_and_si512(v, mask);
                        if p.form.hi_bits > 0 {
                            add_high_bits(p, r[k], pass * DW + i, &mut hi[k], &mut lo[k]);
                        }
                        if let Some(t) = table {
                            hi[k] = _mm512_shuffle_epi8(t, hi[k]);
                            lo[k] = _mm512_shuffle_epi8(t, lo[k]);
                        }
                    }
                    for (t, a) in ts.iter().enumerate() {
                        // SAFETY: this block's activations, 8 per code dword, inside token t's.
                        let x = a.perm.as_ptr().add(b * block + (pass * DW + i) * 8);
                        let xe = _mm512_set1_epi32((x as *const i32).read_unaligned());
                        let xo = _mm512_set1_epi32((x.add(4) as *const i32).read_unaligned());
                        for k in 0..2 {
                            d[t][k] = _mm512_dpbusd_epi32(d[t][k], hi[k], xe);
                            d[t][k] = _mm512_dpbusd_epi32(d[t][k], lo[k], xo);
                        }
                    }
                }
            }
            for k in 0..2 {
                // SAFETY: the record ends with the 16 rows' parameters.
                let (s, m) = block_params(r[k].add(p.params_at()), p, p.form.unsigned_offset());
                for (t, a) in ts.iter().enumerate() {
                    let sx = _mm512_set1_ps(*a.scale.get_unchecked(b));
                    let v = _mm512_cvtepi32_ps(d[t][k]);
                    acc[t][k] = _mm512_fmadd_ps(v, _mm512_mul_ps(s, sx), acc[t][k]);
                    let xs = _mm512_set1_ps(*a.scaled_sum.get_unchecked(b));
                    acc[t][k] = _mm512_fmadd_ps(m, xs, acc[t][k]);
                }
            }
        }
        for (t, a) in acc.iter().enumerate() {
            for (k, v) in a.iter().enumerate() {
                // SAFETY: 16 outputs of token t0 + t for group g + k inside `out` (checked by
                // the caller).
                let o = out
                    .as_mut_ptr()
                    .add((self.t0 + t) * self.count + self.col + k * GROUP);
                _mm512_storeu_ps(o, *v);
            }
        }
    }
}

/// The 16 rows' scales `s` and offsets `m = z − off·s` (`−off·s` when symmetric) of a
/// block, from the parameters at the end of its record: a decoded weight is `s·code + m`
/// for the codes as the kernel reads them (`off`: the form's offset, or 128 where a table
/// was read as unsigned bytes, `Form::unsigned_offset`).
///
/// # Safety
/// The CPU must support AVX-512 F and F16C; `pr` points at the record's parameters (16
/// scales, or 16 zero points then 16 scales; f16, or f32 when the form is wide).
#[inline]
#[target_feature(enable = "avx512f,f16c,fma")]
pub(crate) unsafe fn block_params(pr: *const u8, p: &PackedQ4, off: f32) -> (__m512, __m512) {
    let load = |at: usize| {
        if p.form.wide {
            _mm512_loadu_ps(pr.add(at * 2) as *const f32)
        } else {
            _mm512_cvtph_ps(_mm256_loadu_si256(pr.add(at) as *const _))
        }
    };
    if p.sym {
        let s = load(0);
        (s, _mm512_mul_ps(s, _mm512_set1_ps(-off)))
    } else {
        let (z, s) = (load(0), load(32));
        (s, _mm512_fnmadd_ps(_mm512_set1_ps(off), s, z))
    }
}

/// A non-uniform form's table as unsigned bytes (`Form::unsigned_table`) in every 128-bit
/// lane, for `vpshufb`: one shuffle turns 64 codes into their values.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn unsigned_table(p: &PackedQ4) -> Option<__m512i> {
    let t = p.form.unsigned_table()?;
    // SAFETY: `t` holds 16 bytes.
    Some(_mm512_broadcast_i32x4(_mm_loadu_si128(
        t.as_ptr() as *const _
    )))
}

/// Adds the high-bit planes to code vector `i`'s two nibble halves (`hi`: the high nibbles,
/// `lo`: the low), as `q4_packed::Form` lays them out.
///
/// # Safety
/// The CPU must support AVX-512 F/BW; `r` is a record of `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn add_high_bits(
    p: &PackedQ4,
    r: *const u8,
    i: usize,
    hi: &mut __m512i,
    lo: &mut __m512i,
) {
    let vw = p.block / 8;
    for pl in 0..p.form.hi_bits as usize {
        let add = _mm512_set1_epi8(16 << pl);
        for (h, v) in [&mut *hi, &mut *lo].into_iter().enumerate() {
            let bit = pl * 2 * vw + 2 * i + h;
            // SAFETY: plane vector bit / 8 lies inside the record's high-bit planes.
            let plane = _mm512_loadu_si512(r.add((vw + bit / 8) * 64) as *const _);
            let set = _mm512_test_epi8_mask(plane, _mm512_set1_epi8((1u8 << (bit % 8)) as i8));
            *v = _mm512_mask_add_epi8(*v, set, *v, add);
        }
    }
}
