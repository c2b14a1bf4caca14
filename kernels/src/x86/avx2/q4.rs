//! Q4 × int8 rows with AVX2: 32 code bytes (64 weights) per step; `vpmaddubsw` of the nibbles
//! against the even and odd activations (pair sums fit i16: 2·15·127), widened by `vpmaddwd`.

use crate::act::QuantActs;
use crate::q4::Q4Matrix;
use std::arch::x86_64::*;

/// Horizontal sum of 8 floats.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

/// Per-block `s·sx` into `cs` (length ≥ nb + 16); returns `Σ_b (z_b − 8·s_b)·sx_b·Σxq_b`.
/// `sm` is scratch for the row's parameters (length ≥ 2·(nb + 8)).
#[inline]
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn block_scales(
    w: &Q4Matrix,
    r: usize,
    a: &QuantActs,
    cs: &mut [f32],
    sm: &mut [f32],
) -> f32 {
    let nb = w.cols / w.block;
    let (s, m) = sm.split_at_mut(nb + 8);
    row_params(w, r, s, m);
    let mut corr = _mm256_setzero_ps();
    let mut b = 0;
    while b < nb {
        // SAFETY: `s`, `m` have 8 and the activation arrays and `cs` 16 entries past the last
        // block (zeros past `nb` in `s` and `m`, so the extra lanes add nothing).
        let sv = _mm256_loadu_ps(s.as_ptr().add(b));
        let sx = _mm256_loadu_ps(a.scale.as_ptr().add(b));
        _mm256_storeu_ps(cs.as_mut_ptr().add(b), _mm256_mul_ps(sv, sx));
        let xs = _mm256_loadu_ps(a.scaled_sum.as_ptr().add(b));
        corr = _mm256_fmadd_ps(_mm256_loadu_ps(m.as_ptr().add(b)), xs, corr);
        b += 8;
    }
    hsum(corr)
}

/// Rows processed together: each chunk of activations is loaded once for all of them.
const ROWS: usize = 4;

/// # Safety
/// The CPU must support AVX2, FMA and F16C. `w` has `cols % 64 == 0` and buffers checked by
/// `Q4Matrix::check`; `a` was quantized with the same block and chunk 64;
/// `first + y.len() <= w.rows`.
#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn dot_rows(w: &Q4Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    let (cols, block) = (w.cols, w.block);
    let nb = cols / block;
    let stride = nb + 16;
    let mut cs = vec![0.0f32; ROWS * stride];
    let mut sm = vec![0.0f32; 2 * (nb + 8)];
    let mut idx = [0i32; 8];
    for (k, v) in idx.iter_mut().enumerate() {
        *v = (8 * k / block) as i32;
    }
    let idx = _mm256_loadu_si256(idx.as_ptr() as *const _);
    let perm = a.perm.as_ptr();
    let mut i = 0;
    while i < y.len() {
        // Groups of four rows, then single rows.
        let n = if y.len() - i >= ROWS { ROWS } else { 1 };
        let mut corr = [0.0f32; ROWS];
        let mut codes = [w.codes.as_ptr(); ROWS];
        for j in 0..n {
            let r = first + i + j;
            corr[j] = block_scales(w, r, a, &mut cs[j * stride..(j + 1) * stride], &mut sm);
            codes[j] = w.codes.as_ptr().add(r * cols / 2);
        }
        let rows = Rows {
            codes,
            cs: cs.as_ptr(),
            stride,
            perm,
            cols,
            block,
            idx,
        };
        // A full group of rows compiles to straight-line code with the sums in registers.
        let acc = if n == ROWS {
            rows.run::<ROWS>()
        } else {
            rows.run::<1>()
        };
        for j in 0..n {
            y[i + j] = acc[j] + corr[j];
        }
        i += n;
    }
}

/// Row `r`'s per-block `scale` and `zero − 8·scale` as f32 (`nb + 8` room each; the entries
/// past `nb` of the last group of eight are zero).
#[inline]
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn row_params(w: &Q4Matrix, r: usize, s_out: &mut [f32], m_out: &mut [f32]) {
    let nb = w.cols / w.block;
    let pb = if w.sym { 2 } else { 4 };
    let row = std::slice::from_raw_parts(w.params.as_ptr().add(r * nb * pb), nb * pb);
    let split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    let eight = _mm256_set1_ps(8.0);
    let mut b = 0;
    while b < nb {
        let mut pad = [0u8; 32];
        let group = if b + 8 <= nb {
            &row[b * pb..(b + 8) * pb]
        } else {
            pad[..(nb - b) * pb].copy_from_slice(&row[b * pb..]);
            &pad[..8 * pb]
        };
        let (z, s) = if w.sym {
            // SAFETY: `group` holds 8 f16 scales.
            let raw = _mm_loadu_si128(group.as_ptr() as *const _);
            (_mm256_setzero_ps(), _mm256_cvtph_ps(raw))
        } else {
            // SAFETY: `group` holds 8 (zero, scale) f16 pairs.
            let lo = _mm256_cvtph_ps(_mm_loadu_si128(group.as_ptr() as *const _));
            let hi = _mm256_cvtph_ps(_mm_loadu_si128(group.as_ptr().add(16) as *const _));
            let (lo, hi) = (
                _mm256_permutevar8x32_ps(lo, split),
                _mm256_permutevar8x32_ps(hi, split),
            );
            (
                _mm256_permute2f128_ps::<0x20>(lo, hi),
                _mm256_permute2f128_ps::<0x31>(lo, hi),
            )
        };
        // SAFETY: the outputs have 8 entries of room past the last block.
        _mm256_storeu_ps(s_out.as_mut_ptr().add(b), s);
        _mm256_storeu_ps(m_out.as_mut_ptr().add(b), _mm256_fnmadd_ps(eight, s, z));
        b += 8;
    }
}

/// Rows and tokens per register tile of the batched kernel.
const TILE_ROWS: usize = 2;
const TILE_TOKENS: usize = 4;
/// Tokens whose activations are reused across all rows of a band before moving on.
const TOKEN_BLOCK: usize = 16;

/// Batched rows: `out[t·count + i] = row(first + i) · x_t`. Each unpacked chunk of codes
/// serves four tokens, each loaded activation chunk two rows.
///
/// # Safety
/// As [`dot_rows`], with every `acts[t]` quantized with the matrix's block and chunk 64,
/// `first + count <= w.rows` and `out.len() == acts.len() · count`.
#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    w: &Q4Matrix,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let (cols, block) = (w.cols, w.block);
    let nb = cols / block;
    let mut idx = [0i32; 8];
    for (k, v) in idx.iter_mut().enumerate() {
        *v = (8 * k / block) as i32;
    }
    let idx = _mm256_loadu_si256(idx.as_ptr() as *const _);
    let mut s = vec![0.0f32; TILE_ROWS * (nb + 8)];
    let mut m = vec![0.0f32; TILE_ROWS * (nb + 8)];
    // Token blocks outermost: a block's activations (16 × cols bytes) stay in L1 while every
    // row pair of the band passes over them.
    let mut tb = 0;
    while tb < acts.len() {
        let tb_end = (tb + TOKEN_BLOCK).min(acts.len());
        let mut i = 0;
        while i < count {
            let nr = TILE_ROWS.min(count - i);
            let mut codes = [w.codes.as_ptr(); TILE_ROWS];
            for j in 0..nr {
                let r = first + i + j;
                row_params(
                    w,
                    r,
                    &mut s[j * (nb + 8)..(j + 1) * (nb + 8)],
                    &mut m[j * (nb + 8)..(j + 1) * (nb + 8)],
                );
                codes[j] = w.codes.as_ptr().add(r * cols / 2);
            }
            let mut t0 = tb;
            while t0 < tb_end {
                let nt = TILE_TOKENS.min(tb_end - t0);
                let ts = &acts[t0..t0 + nt];
                let tile = Tile {
                    codes,
                    s: s.as_ptr(),
                    stride: nb + 8,
                    cols,
                    block,
                    idx,
                };
                // Fixed tile sizes compile to straight-line code with the sums in registers.
                let acc = match (nr, nt) {
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
                    let mj = &m[j * (nb + 8)..j * (nb + 8) + nb];
                    for (t, a) in ts.iter().enumerate() {
                        let corr: f32 = mj.iter().zip(&a.scaled_sum).map(|(x, y)| x * y).sum();
                        out[(t0 + t) * count + i + j] = acc[j][t] + corr;
                    }
                }
                t0 += nt;
            }
            i += nr;
        }
        tb = tb_end;
    }
}

/// One register tile of the batched kernel: up to `TILE_ROWS` rows × `TILE_TOKENS` tokens.
struct Tile {
    codes: [*const u8; TILE_ROWS],
    /// Row scales, `stride` apart per row.
    s: *const f32,
    stride: usize,
    cols: usize,
    block: usize,
    idx: __m256i,
}

impl Tile {
    /// `sums[j][t]`: row j · token t without the zero-point correction.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `R` ≤ the rows and `T` = `ts.len()` tokens the caller set up, with
    /// the buffers `dot_rows_tokens` checked.
    #[inline]
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn run<const R: usize, const T: usize>(
        &self,
        ts: &[QuantActs],
    ) -> [[f32; TILE_TOKENS]; TILE_ROWS] {
        let mask = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        for c in 0..self.cols / 64 {
            // The first block chunk c touches; lane k of a chunk is in block base + 8k/block.
            let base = c * 64 / self.block;
            let mut hi = [_mm256_setzero_si256(); R];
            let mut lo = [_mm256_setzero_si256(); R];
            for j in 0..R {
                // SAFETY: chunk c's 32 code bytes lie inside row j.
                let v = _mm256_loadu_si256(self.codes[j].add(c * 32) as *const _);
                hi[j] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
                lo[j] = _mm256_and_si256(v, mask);
            }
            for (t, a) in ts.iter().enumerate() {
                // SAFETY: chunk c's 64 activations lie inside token t's vector.
                let xe = _mm256_loadu_si256(a.perm.as_ptr().add(c * 64) as *const _);
                let xo = _mm256_loadu_si256(a.perm.as_ptr().add(c * 64 + 32) as *const _);
                for j in 0..R {
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(hi[j], xe),
                        _mm256_maddubs_epi16(lo[j], xo),
                    );
                    let d = _mm256_madd_epi16(p, ones);
                    let sj = self.s.add(j * self.stride + base);
                    // SAFETY: the row scales have 8 and `a.scale` 16 entries past the last block.
                    let sc = if self.block == 64 {
                        _mm256_set1_ps(*sj * *a.scale.as_ptr().add(base))
                    } else {
                        _mm256_permutevar8x32_ps(
                            _mm256_mul_ps(
                                _mm256_loadu_ps(sj),
                                _mm256_loadu_ps(a.scale.as_ptr().add(base)),
                            ),
                            self.idx,
                        )
                    };
                    acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][t]);
                }
            }
        }
        let mut sums = [[0.0f32; TILE_TOKENS]; TILE_ROWS];
        for j in 0..R {
            for t in 0..T {
                sums[j][t] = hsum(acc[j][t]);
            }
        }
        sums
    }
}

/// A group of rows of the single-token kernel, sharing each activation load.
struct Rows {
    codes: [*const u8; ROWS],
    /// Combined scales `s·sx` per block, `stride` apart per row.
    cs: *const f32,
    stride: usize,
    perm: *const i8,
    cols: usize,
    block: usize,
    idx: __m256i,
}

impl Rows {
    /// Row j · x for the first `R` rows, without the zero-point correction.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `R` rows set up by `dot_rows` with the buffers it checked.
    #[inline]
    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn run<const R: usize>(&self) -> [f32; ROWS] {
        let mask = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for c in 0..self.cols / 64 {
            // SAFETY: chunk c's 64 activations lie inside the vector.
            let xe = _mm256_loadu_si256(self.perm.add(c * 64) as *const _);
            let xo = _mm256_loadu_si256(self.perm.add(c * 64 + 32) as *const _);
            for j in 0..R {
                // SAFETY: chunk c's 32 code bytes lie inside row j.
                let v = _mm256_loadu_si256(self.codes[j].add(c * 32) as *const _);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
                let lo = _mm256_and_si256(v, mask);
                let p =
                    _mm256_add_epi16(_mm256_maddubs_epi16(hi, xe), _mm256_maddubs_epi16(lo, xo));
                let d = _mm256_madd_epi16(p, ones);
                // SAFETY: `cs` has 16 entries past the last block of each row.
                let cj = self.cs.add(j * self.stride + c * 64 / self.block);
                let sc = if self.block == 64 {
                    _mm256_broadcast_ss(&*cj)
                } else {
                    _mm256_permutevar8x32_ps(_mm256_loadu_ps(cj), self.idx)
                };
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j]);
            }
        }
        let mut sums = [0.0f32; ROWS];
        for j in 0..R {
            sums[j] = hsum(acc[j]);
        }
        sums
    }
}
