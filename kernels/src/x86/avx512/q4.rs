//! Q4 × int8 with AVX-512 VNNI: 64 code bytes (128 weights) per step, `vpdpbusd` of the high
//! and low nibbles against the even and odd activations, one float scale per 8-lane group.
//!
//! One register tile of up to 4 rows × 4 tokens serves both decode (one token, four rows
//! sharing every activation load) and prefill (each unpacked chunk of codes used by four
//! tokens). A row width that is an odd multiple of 64 ends in a half chunk, loaded masked.

use crate::act::QuantActs;
use crate::q4::Q4Matrix;
use std::arch::x86_64::*;

/// Rows and tokens per register tile: 16 accumulators, 8 unpacked code vectors.
const TILE_ROWS: usize = 4;
const TILE_TOKENS: usize = 4;
/// Tokens whose activations stay in L1 while every row group of a band passes over them.
const TOKEN_BLOCK: usize = 16;
/// How far ahead (in rows) the single-token kernel prefetches codes and parameters.
const PREFETCH_ROWS: usize = 16;

/// Lane k of a 128-weight step covers weights 8k..8k+8: its block is `8k / block`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn lane_blocks(block: usize) -> __m512i {
    let mut idx = [0i32; 16];
    for (k, v) in idx.iter_mut().enumerate() {
        *v = (8 * k / block) as i32;
    }
    // SAFETY: `idx` holds 16 i32 (64 bytes).
    _mm512_loadu_si512(idx.as_ptr() as *const _)
}

/// Row `r`'s blocks `b..b + 16` (fewer at the row's end; the other lanes are zero): their
/// `scale` and `zero − 8·scale` as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn block_params16(w: &Q4Matrix, r: usize, b: usize) -> (__m512, __m512) {
    let nb = w.cols / w.block;
    let k = ((1u32 << (nb - b).min(16)) - 1) as __mmask16;
    if w.sym {
        // SAFETY: the mask limits the load to this row's remaining scales.
        let raw =
            _mm256_maskz_loadu_epi16(k, w.params.as_ptr().add((r * nb + b) * 2) as *const i16);
        let s = _mm512_cvtph_ps(raw);
        (s, _mm512_mul_ps(s, _mm512_set1_ps(-8.0)))
    } else {
        // SAFETY: as above, one 32-bit (zero, scale) pair per lane.
        let raw =
            _mm512_maskz_loadu_epi32(k, w.params.as_ptr().add((r * nb + b) * 4) as *const i32);
        let lo = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
        let hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(raw));
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let z = _mm512_permutex2var_ps(lo, even, hi);
        let s = _mm512_permutex2var_ps(lo, odd, hi);
        (s, _mm512_fnmadd_ps(_mm512_set1_ps(8.0), s, z))
    }
}

/// Row `r`'s per-block `scale` and `zero − 8·scale` as f32 into `s_out` and `m_out` (each
/// with room for `nb + 16`; entries past `nb` are zero, so vector loads past the end and the
/// masked half chunk add nothing).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn row_params(w: &Q4Matrix, r: usize, s_out: &mut [f32], m_out: &mut [f32]) {
    let nb = w.cols / w.block;
    let mut b = 0;
    while b < nb {
        let (s, m) = block_params16(w, r, b);
        // SAFETY: both outputs have room for nb + 16 entries and b < nb; masked-off lanes
        // are zero, so the entries past nb stay zero.
        _mm512_storeu_ps(s_out.as_mut_ptr().add(b), s);
        _mm512_storeu_ps(m_out.as_mut_ptr().add(b), m);
        b += 16;
    }
}

/// `Σ_b m_b · scaled_sum_b`: the zero-point correction of one row against one token.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn correction(m: *const f32, a: &QuantActs, nb: usize) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut b = 0;
    while b < nb {
        // SAFETY: `m` and `a.scaled_sum` both have 16 entries of room past `nb`, zero in `m`.
        acc = _mm512_fmadd_ps(
            _mm512_loadu_ps(m.add(b)),
            _mm512_loadu_ps(a.scaled_sum.as_ptr().add(b)),
            acc,
        );
        b += 16;
    }
    _mm512_reduce_add_ps(acc)
}

/// Per-row scratch: f32 scales and zero-point terms, `stride` floats per row.
struct Scratch {
    s: Vec<f32>,
    m: Vec<f32>,
    stride: usize,
}

impl Scratch {
    fn new(nb: usize) -> Self {
        let stride = nb + 16;
        Scratch {
            s: vec![0.0; TILE_ROWS * stride],
            m: vec![0.0; TILE_ROWS * stride],
            stride,
        }
    }
}

/// Sets up rows `first..first + nr` in `sc` and returns the tile that reads them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn prepare(w: &Q4Matrix, first: usize, nr: usize, sc: &mut Scratch, idx: __m512i) -> Tile {
    let mut codes = [w.codes.as_ptr(); TILE_ROWS];
    let st = sc.stride;
    for j in 0..nr {
        let r = first + j;
        row_params(
            w,
            r,
            &mut sc.s[j * st..(j + 1) * st],
            &mut sc.m[j * st..(j + 1) * st],
        );
        codes[j] = w.codes.as_ptr().add(r * w.cols / 2);
    }
    Tile {
        codes,
        s: sc.s.as_ptr(),
        stride: st,
        cols: w.cols,
        block: w.block,
        idx,
    }
}

/// Runs the tile for `nr` rows × `ts.len()` tokens; `store(j, t, value)` receives each sum
/// including the zero-point correction.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn run_tile(
    tile: &Tile,
    sc: &Scratch,
    nr: usize,
    ts: &[QuantActs],
    nb: usize,
    mut store: impl FnMut(usize, usize, f32),
) {
    // Fixed tile sizes compile to straight-line code with the sums in registers.
    let acc = match (nr, ts.len()) {
        (4, 4) => tile.run::<4, 4>(ts),
        (4, 3) => tile.run::<4, 3>(ts),
        (4, 2) => tile.run::<4, 2>(ts),
        (4, _) => tile.run::<4, 1>(ts),
        (3, 4) => tile.run::<3, 4>(ts),
        (3, 3) => tile.run::<3, 3>(ts),
        (3, 2) => tile.run::<3, 2>(ts),
        (3, _) => tile.run::<3, 1>(ts),
        (2, 4) => tile.run::<2, 4>(ts),
        (2, 3) => tile.run::<2, 3>(ts),
        (2, 2) => tile.run::<2, 2>(ts),
        (2, _) => tile.run::<2, 1>(ts),
        (_, 4) => tile.run::<1, 4>(ts),
        (_, 3) => tile.run::<1, 3>(ts),
        (_, 2) => tile.run::<1, 2>(ts),
        _ => tile.run::<1, 1>(ts),
    };
    for j in 0..nr {
        let m = sc.m.as_ptr().add(j * sc.stride);
        for (t, a) in ts.iter().enumerate() {
            store(j, t, acc[j][t] + correction(m, a, nb));
        }
    }
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C and FMA. `w` has `cols % 64 == 0` and
/// buffers checked by `Q4Matrix::check`; `a` was quantized with the same block and chunk 128;
/// `first + y.len() <= w.rows`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows(w: &Q4Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let nb = w.cols / w.block;
    let mut sc = Scratch::new(nb);
    let idx = lane_blocks(w.block);
    let row_bytes = w.cols / 2;
    let pb = if w.sym { 2 } else { 4 };
    let end = (first + y.len()) * row_bytes;
    let pend = (first + y.len()) * nb * pb;
    let mut i = 0;
    while i < y.len() {
        let nr = TILE_ROWS.min(y.len() - i);
        // Decode streams the weights from memory once: ask for the rows PREFETCH_ROWS ahead
        // now, so their loads overlap this group's arithmetic.
        let from = (first + i + PREFETCH_ROWS) * row_bytes;
        let mut at = from;
        while at < (from + nr * row_bytes).min(end) {
            _mm_prefetch::<_MM_HINT_T0>(w.codes.as_ptr().add(at) as *const i8);
            at += 64;
        }
        let pfrom = (first + i + PREFETCH_ROWS) * nb * pb;
        let mut at = pfrom;
        while at < (pfrom + nr * nb * pb).min(pend) {
            _mm_prefetch::<_MM_HINT_T0>(w.params.as_ptr().add(at) as *const i8);
            at += 64;
        }
        let mut codes = [w.codes.as_ptr(); TILE_ROWS];
        let mut corr = [0.0f32; TILE_ROWS];
        for j in 0..nr {
            let r = first + i + j;
            corr[j] = row_scales(w, r, a, &mut sc.s[j * sc.stride..(j + 1) * sc.stride]);
            codes[j] = w.codes.as_ptr().add(r * row_bytes);
        }
        let tile = Tile {
            codes,
            s: sc.s.as_ptr(),
            stride: sc.stride,
            cols: w.cols,
            block: w.block,
            idx,
        };
        let acc = match nr {
            4 => tile.run1::<4>(a),
            3 => tile.run1::<3>(a),
            2 => tile.run1::<2>(a),
            _ => tile.run1::<1>(a),
        };
        for j in 0..nr {
            y[i + j] = acc[j] + corr[j];
        }
        i += nr;
    }
}

/// Decode's per-row set-up: the combined scales `s·sx` per block into `cs` (room for
/// `nb + 16`, zeros past `nb`), and the row's zero-point correction `Σ_b m_b·sx_b·Σxq_b`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn row_scales(w: &Q4Matrix, r: usize, a: &QuantActs, cs: &mut [f32]) -> f32 {
    let nb = w.cols / w.block;
    let mut corr = _mm512_setzero_ps();
    let mut b = 0;
    while b < nb {
        let (s, m) = block_params16(w, r, b);
        // SAFETY: the activation arrays have 16 entries of room past the last block (zeros)
        // and `cs` nb + 16; masked-off lanes of `s` and `m` are zero.
        let sx = _mm512_loadu_ps(a.scale.as_ptr().add(b));
        let xs = _mm512_loadu_ps(a.scaled_sum.as_ptr().add(b));
        _mm512_storeu_ps(cs.as_mut_ptr().add(b), _mm512_mul_ps(s, sx));
        corr = _mm512_fmadd_ps(m, xs, corr);
        b += 16;
    }
    _mm512_reduce_add_ps(corr)
}

/// Batched rows: `out[t·count + i] = row(first + i) · x_t`.
///
/// # Safety
/// As [`dot_rows`], with every `acts[t]` quantized with the matrix's block and chunk 128,
/// `first + count <= w.rows` and `out.len() == acts.len() · count`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    w: &Q4Matrix,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let nb = w.cols / w.block;
    let mut sc = Scratch::new(nb);
    let idx = lane_blocks(w.block);
    let mut tb = 0;
    while tb < acts.len() {
        let tb_end = (tb + TOKEN_BLOCK).min(acts.len());
        let mut i = 0;
        while i < count {
            let nr = TILE_ROWS.min(count - i);
            let tile = prepare(w, first + i, nr, &mut sc, idx);
            let mut t0 = tb;
            while t0 < tb_end {
                let nt = TILE_TOKENS.min(tb_end - t0);
                run_tile(&tile, &sc, nr, &acts[t0..t0 + nt], nb, |j, t, v| {
                    out[(t0 + t) * count + i + j] = v
                });
                t0 += nt;
            }
            i += nr;
        }
        tb = tb_end;
    }
}

/// One register tile: up to `TILE_ROWS` rows × `TILE_TOKENS` tokens.
struct Tile {
    codes: [*const u8; TILE_ROWS],
    /// Row scales (f32 per block), `stride` apart per row.
    s: *const f32,
    stride: usize,
    cols: usize,
    block: usize,
    idx: __m512i,
}

impl Tile {
    /// Decode: rows j · one token without the zero-point correction, with `s` holding the
    /// combined scales `s·sx` (see [`row_scales`]); each activation chunk is loaded once for
    /// all `R` rows.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `R` rows set up by `dot_rows`, `a` quantized with chunk 128.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    unsafe fn run1<const R: usize>(&self, a: &QuantActs) -> [f32; TILE_ROWS] {
        let mask = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); R];
        let full = self.cols / 128;
        let steps = full + (self.cols % 128 != 0) as usize;
        for c in 0..steps {
            let (k, xo_off) = if c < full {
                (!0u64, 64)
            } else {
                (0xFFFF_FFFFu64, 32)
            };
            let base = c * 128 / self.block;
            let p = a.perm.as_ptr().add(c * 128);
            // SAFETY: the masks keep the loads inside the activations and row j's codes.
            let xe = _mm512_maskz_loadu_epi8(k, p);
            let xo = _mm512_maskz_loadu_epi8(k, p.add(xo_off));
            for j in 0..R {
                let v = _mm512_maskz_loadu_epi8(k, self.codes[j].add(c * 64) as *const i8);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
                let lo = _mm512_and_si512(v, mask);
                let d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, xe);
                let d = _mm512_dpbusd_epi32(d, lo, xo);
                // SAFETY: the combined scales have 16 zero entries of room past the last block.
                let sc = _mm512_permutexvar_ps(
                    self.idx,
                    _mm512_loadu_ps(self.s.add(j * self.stride + base)),
                );
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc[j]);
            }
        }
        let mut sums = [0.0f32; TILE_ROWS];
        for j in 0..R {
            sums[j] = _mm512_reduce_add_ps(acc[j]);
        }
        sums
    }

    /// `sums[j][t]`: row j · token t without the zero-point correction.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `R` rows set up by `prepare`, `T == ts.len()` tokens quantized
    /// with chunk 128.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    unsafe fn run<const R: usize, const T: usize>(
        &self,
        ts: &[QuantActs],
    ) -> [[f32; TILE_TOKENS]; TILE_ROWS] {
        let mask = _mm512_set1_epi8(0x0F);
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        let full = self.cols / 128;
        let half = self.cols % 128 != 0;
        let steps = full + half as usize;
        for c in 0..steps {
            // The half chunk at the end: 32 code bytes, activations as [evens 32, odds 32].
            let (kc, kx, xo_off) = if c < full {
                (!0u64, !0u64, 64)
            } else {
                (0xFFFF_FFFFu64, 0xFFFF_FFFFu64, 32)
            };
            let base = c * 128 / self.block;
            let mut hi = [_mm512_setzero_si512(); R];
            let mut lo = [_mm512_setzero_si512(); R];
            let mut srow = [_mm512_setzero_ps(); R];
            for j in 0..R {
                // SAFETY: the mask keeps the load inside row j's codes for this chunk.
                let v = _mm512_maskz_loadu_epi8(kc, self.codes[j].add(c * 64) as *const i8);
                hi[j] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
                lo[j] = _mm512_and_si512(v, mask);
                // SAFETY: row scales have 16 zero entries of room past the last block.
                let sj = _mm512_loadu_ps(self.s.add(j * self.stride + base));
                srow[j] = _mm512_permutexvar_ps(self.idx, sj);
            }
            for (t, a) in ts.iter().enumerate() {
                let p = a.perm.as_ptr().add(c * 128);
                // SAFETY: the masks keep the loads inside token t's activations.
                let xe = _mm512_maskz_loadu_epi8(kx, p);
                let xo = _mm512_maskz_loadu_epi8(kx, p.add(xo_off));
                // SAFETY: `a.scale` has 16 entries of room past the last block.
                let sx =
                    _mm512_permutexvar_ps(self.idx, _mm512_loadu_ps(a.scale.as_ptr().add(base)));
                for j in 0..R {
                    let d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[j], xe);
                    let d = _mm512_dpbusd_epi32(d, lo[j], xo);
                    let s = _mm512_mul_ps(srow[j], sx);
                    acc[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[j][t]);
                }
            }
        }
        let mut sums = [[0.0f32; TILE_TOKENS]; TILE_ROWS];
        for j in 0..R {
            for t in 0..T {
                sums[j][t] = _mm512_reduce_add_ps(acc[j][t]);
            }
        }
        sums
    }
}
