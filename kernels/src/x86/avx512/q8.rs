//! Q8 × int8 with AVX-512 VNNI. `vpdpbusd` multiplies unsigned by signed bytes, so the
//! weights are offset to `q + 128` (a sign-bit flip) and `128·Σxq` is taken back per block.
//!
//! A register tile of up to 4 rows × 4 tokens: decode shares each activation load across
//! four rows, prefill each loaded code chunk across four tokens.

use crate::act::QuantActs;
use crate::q8::Q8Matrix;
use std::arch::x86_64::*;

const TILE_ROWS: usize = 4;
const TILE_TOKENS: usize = 4;
/// Tokens whose activations stay in L1 while every row group of a band passes over them.
const TOKEN_BLOCK: usize = 16;

/// Row scales as f32, `stride` (= blocks + 16) apart per row; entries past the blocks are 0.
struct Scratch {
    s: Vec<f32>,
    stride: usize,
}

/// Converts rows `first..first + nr`'s f16 block scales into `sc`; returns their code pointers.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn prepare(
    w: &Q8Matrix,
    first: usize,
    nr: usize,
    sc: &mut Scratch,
) -> [*const u8; TILE_ROWS] {
    let nb = w.cols / w.block;
    let mut codes = [w.codes.as_ptr(); TILE_ROWS];
    for j in 0..nr {
        let r = first + j;
        let src = w.scales.as_ptr().add(r * nb * 2);
        let dst = sc.s.as_mut_ptr().add(j * sc.stride);
        let mut b = 0;
        while b < nb {
            let k = ((1u32 << (nb - b).min(16)) - 1) as __mmask16;
            // SAFETY: the mask keeps the load inside row r's scales; `dst` has 16 entries of
            // room past the last block and masked-off lanes store zeros there.
            let raw = _mm256_maskz_loadu_epi16(k, src.add(b * 2) as *const i16);
            _mm512_storeu_ps(dst.add(b), _mm512_cvtph_ps(raw));
            b += 16;
        }
        codes[j] = w.codes.as_ptr().add(r * w.cols);
    }
    codes
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, F16C and FMA. `w.block % 64 == 0`, buffers
/// checked by `Q8Matrix::check`; `a` quantized with the same block; `first + y.len() <= rows`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows(w: &Q8Matrix, first: usize, a: &QuantActs, y: &mut [f32]) {
    dot_rows_tokens(w, first, y.len(), std::slice::from_ref(a), y)
}

/// Batched rows: `out[t·count + i] = row(first + i) · x_t`.
///
/// # Safety
/// As [`dot_rows`], with every `acts[t]` quantized with the matrix's block,
/// `first + count <= w.rows` and `out.len() == acts.len() · count`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(crate) unsafe fn dot_rows_tokens(
    w: &Q8Matrix,
    first: usize,
    count: usize,
    acts: &[QuantActs],
    out: &mut [f32],
) {
    let nb = w.cols / w.block;
    let mut sc = Scratch {
        s: vec![0.0; TILE_ROWS * (nb + 16)],
        stride: nb + 16,
    };
    let mut tb = 0;
    while tb < acts.len() {
        let tb_end = (tb + TOKEN_BLOCK).min(acts.len());
        let mut i = 0;
        while i < count {
            let nr = TILE_ROWS.min(count - i);
            let codes = prepare(w, first + i, nr, &mut sc);
            let tile = Tile {
                codes,
                s: sc.s.as_ptr(),
                stride: sc.stride,
                cols: w.cols,
                block: w.block,
            };
            let mut t0 = tb;
            while t0 < tb_end {
                let nt = TILE_TOKENS.min(tb_end - t0);
                let ts = &acts[t0..t0 + nt];
                let acc = match (nr, nt) {
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
                    for t in 0..nt {
                        out[(t0 + t) * count + i + j] = acc[j][t];
                    }
                }
                t0 += nt;
            }
            i += nr;
        }
        tb = tb_end;
    }
}

struct Tile {
    codes: [*const u8; TILE_ROWS],
    s: *const f32,
    stride: usize,
    cols: usize,
    block: usize,
}

impl Tile {
    /// `sums[j][t]`: row j · token t, offset taken back.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI and FMA; `R` rows set up by `prepare`, `T == ts.len()`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    unsafe fn run<const R: usize, const T: usize>(
        &self,
        ts: &[QuantActs],
    ) -> [[f32; TILE_TOKENS]; TILE_ROWS] {
        let flip = _mm512_set1_epi8(-128);
        let ts: &[QuantActs; T] = ts.try_into().expect("tile width");
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        // The offset's correction, Σ_b s_b·sx_b·128·Σxq_b, accumulated per block in lane 0.
        let mut corr = [[0.0f32; T]; R];
        let per_block = self.block / 64;
        for b in 0..self.cols / self.block {
            let mut d = [[_mm512_setzero_si512(); T]; R];
            for k in 0..per_block {
                let c = (b * per_block + k) * 64;
                let mut wv = [_mm512_setzero_si512(); R];
                for j in 0..R {
                    // SAFETY: 64 codes inside row j (block % 64 == 0, c + 64 <= cols).
                    wv[j] = _mm512_xor_si512(
                        _mm512_loadu_si512(self.codes[j].add(c) as *const _),
                        flip,
                    );
                }
                for (t, a) in ts.iter().enumerate() {
                    // SAFETY: 64 activations inside token t's vector.
                    let xv = _mm512_loadu_si512(a.q.as_ptr().add(c) as *const _);
                    for j in 0..R {
                        d[j][t] = _mm512_dpbusd_epi32(d[j][t], wv[j], xv);
                    }
                }
            }
            for (t, a) in ts.iter().enumerate() {
                for j in 0..R {
                    // SAFETY: b is a block of the row; the scratch holds its scale.
                    let s = *self.s.add(j * self.stride + b);
                    let st = s * a.scale[b];
                    acc[j][t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[j][t]), _mm512_set1_ps(st), acc[j][t]);
                    corr[j][t] += s * 128.0 * a.scaled_sum[b];
                }
            }
        }
        let mut sums = [[0.0f32; TILE_TOKENS]; TILE_ROWS];
        for j in 0..R {
            for t in 0..T {
                sums[j][t] = _mm512_reduce_add_ps(acc[j][t]) - corr[j][t];
            }
        }
        sums
    }
}
