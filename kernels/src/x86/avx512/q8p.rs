//! The 16-row interleaved Q8 layout (see `kernels::q8_packed`) with AVX-512 VNNI: the stored
//! codes are already unsigned (`q + 128`), so each 64-byte vector goes straight into a
//! `vpdpbusd` against one broadcast activation dword; per block one multiply-add applies the
//! scales and one takes back `128·Σx`.

use crate::act::QuantActs;
use crate::q8_packed::{PackedQ8, GROUP};
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C and FMA; the arguments were checked by
/// `q8_packed::dot_rows_tokens`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    p: &PackedQ8,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    for g in first / GROUP..(first + count) / GROUP {
        let tile = super::q4p::even_tile(acts.len());
        let mut t0 = 0;
        while t0 < acts.len() {
            let nt = tile.min(acts.len() - t0);
            let ts = &acts[t0..t0 + nt];
            let col = g * GROUP - first;
            match nt {
                1 => run::<1, 4>(p, g, ts, out, count, col, t0),
                2 => run::<2, 2>(p, g, ts, out, count, col, t0),
                3 => run::<3, 1>(p, g, ts, out, count, col, t0),
                _ => run::<4, 1>(p, g, ts, out, count, col, t0),
            }
            t0 += nt;
        }
    }
}

/// One group of 16 rows against `T` tokens with `C` integer accumulators per token.
///
/// # Safety
/// As [`dot_rows_tokens`]; `T == ts.len()`, outputs `col..col + 16` of each token in range.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn run<const T: usize, const C: usize>(
    p: &PackedQ8,
    g: usize,
    ts: &[QuantActs],
    out: &mut [f32],
    count: usize,
    col: usize,
    t0: usize,
) {
    let (nb, rec, block) = (p.blocks(), p.record(), p.block);
    let dw = block / 4;
    let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
    let base = p.data.as_ptr().add(g * nb * rec);
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        let r = base.add(b * rec);
        let mut d = [[_mm512_setzero_si512(); C]; T];
        // dw is a multiple of 16, so of C; `c` is a constant after unrolling, which keeps
        // the accumulators in registers.
        for i0 in (0..dw).step_by(C) {
            for c in 0..C {
                let i = i0 + c;
                // SAFETY: vector i of this record lies inside the group's data.
                let v = _mm512_loadu_si512(r.add(i * 64) as *const _);
                for (t, a) in ts.iter().enumerate() {
                    // SAFETY: activation dword i of block b lies inside token t's codes.
                    let x = (a.q.as_ptr().add(b * block + i * 4) as *const i32).read_unaligned();
                    d[t][c] = _mm512_dpbusd_epi32(d[t][c], v, _mm512_set1_epi32(x));
                }
            }
        }
        // SAFETY: the record ends with the 16 rows' f16 scales.
        let s = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(dw * 64) as *const _));
        for (t, a) in ts.iter().enumerate() {
            let mut dt = d[t][0];
            for c in 1..C {
                dt = _mm512_add_epi32(dt, d[t][c]);
            }
            let sx = _mm512_set1_ps(*a.scale.get_unchecked(b));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dt), _mm512_mul_ps(s, sx), acc[t]);
            let back = _mm512_set1_ps(-128.0 * *a.scaled_sum.get_unchecked(b));
            acc[t] = _mm512_fmadd_ps(s, back, acc[t]);
        }
    }
    for (t, a) in acc.iter().enumerate() {
        // SAFETY: 16 outputs of token t0 + t inside `out` (checked by the caller).
        _mm512_storeu_ps(out.as_mut_ptr().add((t0 + t) * count + col), *a);
    }
}
