//! 4-bit block codec.
//!
//! Codes `q` are 0..=15, two per byte, the first element of a pair in the HIGH nibble.
//! Asymmetric blocks decode as `w = (q − 8) · scale + zero` with an f16 `(zero, scale)` pair
//! stored in that order (MNN's convention); symmetric blocks as `w = (q − 8) · scale` with one
//! f16 scale. Decoding is a multiply then an add in f32, never fused, so every kernel and every
//! exporter agrees on the exact value.
//!
//! Tensor layout: codes plane (`rows × cols/2` bytes), then params plane
//! (`rows × cols/block` entries of 4 bytes asymmetric or 2 bytes symmetric).

use super::search::{self, Method};
use super::ErrorStats;
use half::f16;
use rayon::prelude::*;

pub use super::params::{BlockParams, Codec};

pub fn param_bytes(sym: bool) -> usize {
    if sym {
        2
    } else {
        4
    }
}

/// Decodes one row. `codes` holds `cols/2` bytes, `params` the row's block parameters.
pub fn dequantize_row(codes: &[u8], params: &[u8], block: usize, sym: bool, out: &mut [f32]) {
    let pb = param_bytes(sym);
    for (b, (chunk, out)) in codes
        .chunks_exact(block / 2)
        .zip(out.chunks_exact_mut(block))
        .enumerate()
    {
        let p = read_params(&params[b * pb..(b + 1) * pb], sym).widen();
        for (pair, o) in chunk.iter().zip(out.chunks_exact_mut(2)) {
            o[0] = p.decode(pair >> 4);
            o[1] = p.decode(pair & 0x0F);
        }
    }
}

pub fn read_params(b: &[u8], sym: bool) -> BlockParams {
    if sym {
        BlockParams {
            scale: f16::from_le_bytes([b[0], b[1]]),
            zero: f16::ZERO,
        }
    } else {
        BlockParams {
            zero: f16::from_le_bytes([b[0], b[1]]),
            scale: f16::from_le_bytes([b[2], b[3]]),
        }
    }
}

fn write_params(p: BlockParams, sym: bool, out: &mut [u8]) {
    if sym {
        out.copy_from_slice(&p.scale.to_le_bytes());
    } else {
        out[..2].copy_from_slice(&p.zero.to_le_bytes());
        out[2..].copy_from_slice(&p.scale.to_le_bytes());
    }
}

/// Packs the codes of a block, first element in the high nibble.
pub fn pack_codes(codes: &[u8], out: &mut [u8]) {
    for (o, pair) in out.iter_mut().zip(codes.chunks_exact(2)) {
        *o = (pair[0] << 4) | (pair[1] & 0x0F);
    }
}

/// Encodes a block with given parameters; returns the squared error and the largest error.
fn encode_block(x: &[f32], p: BlockParams, codes: &mut [u8]) -> (f64, f64) {
    let p = p.widen();
    let mut q = [0u8; 128];
    let (mut err, mut max) = (0.0f64, 0.0f32);
    for (i, &v) in x.iter().enumerate() {
        q[i] = p.encode(v);
        let e = p.decode(q[i]) - v;
        err += e as f64 * e as f64;
        max = max.max(e.abs());
    }
    pack_codes(&q[..x.len()], codes);
    (err, max as f64)
}

/// Result of quantizing one tensor.
pub struct Quantized {
    /// Codes plane, then params plane.
    pub bytes: Vec<u8>,
    pub error: ErrorStats,
    /// Blocks stored exactly because they already lay on a 4-bit grid (QAT import).
    pub grid_blocks: usize,
    /// The first off-grid blocks as (row, block) when `grid` was requested.
    pub off_grid: Vec<(usize, usize)>,
}

/// How to choose a tensor's Q4 blocks.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    pub block: usize,
    pub sym: bool,
    pub method: Method,
    /// Store blocks that already lie on a 4-bit grid exactly (QAT import).
    pub grid: bool,
    /// Mean squared activation per input column (`cols` values), from calibration.
    pub importance: Option<&'a [f32]>,
    /// Error compensation over the calibration activations (GPTQ, `super::gptq`).
    pub compensation: Option<&'a super::gptq::Compensation>,
}

/// Quantizes a `[rows, cols]` matrix (rows in parallel). `cols` must be a multiple of `block`.
pub fn quantize(values: &[f32], rows: usize, cols: usize, opt: Options) -> Quantized {
    let Options {
        block,
        sym,
        method,
        grid,
        importance,
        compensation,
    } = opt;
    assert!(cols % block == 0 && block % 2 == 0 && block <= 128 && values.len() == rows * cols);
    assert!(importance.is_none_or(|a| a.len() == cols));
    // Compensation moves weights off any grid they were on: a QAT source is never calibrated,
    // so `grid` (on by default) has nothing to find here.
    if let Some(c) = compensation.filter(|c| c.cols == cols) {
        return compensated(values, rows, cols, block, sym, method, importance, c);
    }
    let nb = cols / block;
    let pb = param_bytes(sym);
    let mut codes = vec![0u8; rows * cols / 2];
    let mut params = vec![0u8; rows * nb * pb];
    let per_row: Vec<(ErrorStats, usize, Vec<usize>)> = codes
        .par_chunks_mut(cols / 2)
        .zip(params.par_chunks_mut(nb * pb))
        .enumerate()
        .map(|(r, (crow, prow))| {
            let row = &values[r * cols..(r + 1) * cols];
            let mut st = ErrorStats::default();
            let (mut on_grid, mut off) = (0, Vec::new());
            for b in 0..nb {
                let x = &row[b * block..(b + 1) * block];
                let exact = if grid {
                    super::qat::grid_params(x, sym)
                } else {
                    None
                };
                if exact.is_some() {
                    on_grid += 1;
                } else if grid && off.len() < 16 {
                    off.push(b);
                }
                let imp = importance.map(|a| &a[b * block..(b + 1) * block]);
                let p = exact.unwrap_or_else(|| search::q4_params(x, sym, method, imp));
                let (err, max) = encode_block(x, p, &mut crow[b * block / 2..(b + 1) * block / 2]);
                write_params(p, sym, &mut prow[b * pb..(b + 1) * pb]);
                st.sum_sq_err += err;
                st.sum_sq += x.iter().map(|&v| v as f64 * v as f64).sum::<f64>();
                st.max_abs = st.max_abs.max(max);
            }
            (st, on_grid, off)
        })
        .collect();
    let mut error = ErrorStats::default();
    let (mut grid_blocks, mut off_grid) = (0, Vec::new());
    for (r, (st, g, off)) in per_row.into_iter().enumerate() {
        error.merge(&st);
        grid_blocks += g;
        off_grid.extend(
            off.into_iter()
                .map(|b| (r, b))
                .take(64usize.saturating_sub(off_grid.len())),
        );
    }
    codes.extend_from_slice(&params);
    Quantized {
        bytes: codes,
        error,
        grid_blocks,
        off_grid,
    }
}

/// [`quantize`] with GPTQ's error compensation: rows in tiles, each block's parameters from
/// the search on the row as compensation has left it, the error measured against the input.
#[allow(clippy::too_many_arguments)]
fn compensated(
    values: &[f32],
    rows: usize,
    cols: usize,
    block: usize,
    sym: bool,
    method: Method,
    importance: Option<&[f32]>,
    comp: &super::gptq::Compensation,
) -> Quantized {
    use super::gptq::{quantize_tile, TILE};
    let (nb, pb) = (cols / block, param_bytes(sym));
    let mut codes = vec![0u8; rows * cols / 2];
    let mut params = vec![0u8; rows * nb * pb];
    let stats: Vec<ErrorStats> = codes
        .par_chunks_mut(TILE * cols / 2)
        .zip(params.par_chunks_mut(TILE * nb * pb))
        .zip(values.par_chunks(TILE * cols))
        .map(|((ctile, ptile), vtile)| {
            let mut work: Vec<Vec<f32>> = vtile.chunks_exact(cols).map(|r| r.to_vec()).collect();
            let mut st = ErrorStats::default();
            let choose = |_: usize, b: usize, x: &[f32]| -> BlockParams {
                let imp = importance.map(|a| &a[b * block..(b + 1) * block]);
                search::q4_params(x, sym, method, imp)
            };
            quantize_tile(comp, &mut work, block, &choose, &mut |t, b, p, q| {
                pack_codes(q, &mut ctile[t * cols / 2 + b * block / 2..][..block / 2]);
                write_params(p, sym, &mut ptile[(t * nb + b) * pb..][..pb]);
                let c = p.widen();
                let x = &vtile[t * cols + b * block..][..block];
                for (&v, &code) in x.iter().zip(q) {
                    let e = (c.decode(code) - v) as f64;
                    st.sum_sq_err += e * e;
                    st.sum_sq += v as f64 * v as f64;
                    st.max_abs = st.max_abs.max(e.abs());
                }
            });
            st
        })
        .collect();
    let mut error = ErrorStats::default();
    for st in &stats {
        error.merge(st);
    }
    codes.extend_from_slice(&params);
    Quantized {
        bytes: codes,
        error,
        grid_blocks: 0,
        off_grid: Vec::new(),
    }
}

pub fn pack_exact(
    rows: usize,
    cols: usize,
    block: usize,
    sym: bool,
    codes: &[u8],
    params: &[BlockParams],
) -> Vec<u8> {
    let nb = cols / block;
    let pb = param_bytes(sym);
    let mut out = vec![0u8; rows * cols / 2 + rows * nb * pb];
    let (cplane, pplane) = out.split_at_mut(rows * cols / 2);
    pack_codes(codes, cplane);
    for (p, dst) in params.iter().zip(pplane.chunks_exact_mut(pb)) {
        write_params(*p, sym, dst);
    }
    out
}

/// Splits a tensor's bytes into its codes and params planes.
pub fn planes(bytes: &[u8], rows: usize, cols: usize) -> (&[u8], &[u8]) {
    bytes.split_at(rows * cols / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_built_block_decodes_to_known_values() {
        // One row of 32 (block 32), asymmetric: zero = 1.0, scale = 0.5.
        // Bytes: 0x0F → q0 = 0 (high nibble), q1 = 15 (low nibble).
        let mut bytes = vec![0x0F, 0x8A];
        bytes.extend([0x77; 14]);
        bytes.extend(f16::from_f32(1.0).to_le_bytes()); // zero first
        bytes.extend(f16::from_f32(0.5).to_le_bytes()); // then scale
        let (codes, params) = planes(&bytes, 1, 32);
        let mut out = [0.0f32; 32];
        dequantize_row(codes, params, 32, false, &mut out);
        // (0-8)*0.5+1 = -3, (15-8)*0.5+1 = 4.5, (8-8)*.5+1 = 1, (10-8)*.5+1 = 2, (7-8)*.5+1 = 0.5
        assert_eq!(&out[..4], &[-3.0, 4.5, 1.0, 2.0]);
        assert!(out[4..].iter().all(|&v| v == 0.5));

        // Symmetric, scale 0.25: q=0 → -2.0, q=15 → 1.75.
        let mut sym = vec![0x0F];
        sym.extend([0x88; 15]);
        sym.extend(f16::from_f32(0.25).to_le_bytes());
        let (codes, params) = planes(&sym, 1, 32);
        dequantize_row(codes, params, 32, true, &mut out);
        assert_eq!(&out[..3], &[-2.0, 1.75, 0.0]);
    }

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 0.2
            })
            .collect()
    }

    /// The compensated path lays out codes and parameters as the plain one: with uncorrelated
    /// inputs (a diagonal Gram matrix) nothing moves, so every byte and the error agree, for
    /// every block, both modes, with and without importance, on rows not a multiple of the
    /// tile.
    #[test]
    fn compensation_over_uncorrelated_inputs_changes_no_byte() {
        let (rows, cols) = (13, 256);
        let mut h = vec![0f64; cols * cols];
        for i in 0..cols {
            h[i * cols + i] = 0.5 + (i % 7) as f64;
        }
        let c = super::super::gptq::Compensation::from_gram(&h, cols, 100_000).unwrap();
        let imp: Vec<f32> = (0..cols).map(|i| 1.0 + (i % 5) as f32).collect();
        let v = random(rows * cols, 17);
        for block in [32, 64, 128] {
            for sym in [false, true] {
                for importance in [None, Some(imp.as_slice())] {
                    let opt = |compensation| Options {
                        block,
                        sym,
                        method: Method::Search,
                        grid: false,
                        importance,
                        compensation,
                    };
                    let a = quantize(&v, rows, cols, opt(None));
                    let b = quantize(&v, rows, cols, opt(Some(&c)));
                    assert!(a.bytes == b.bytes, "block {block} sym {sym}");
                    assert!((a.error.rel_rms - b.error.rel_rms).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn round_trip_every_block_and_mode() {
        for block in [32, 64, 128] {
            for sym in [false, true] {
                for method in [Method::Rtn, Method::Search] {
                    let (rows, cols) = (5, 256);
                    let v = random(rows * cols, block as u64);
                    let Quantized {
                        bytes, error: st, ..
                    } = quantize(
                        &v,
                        rows,
                        cols,
                        Options {
                            block,
                            sym,
                            method,
                            grid: false,
                            importance: None,
                            compensation: None,
                        },
                    );
                    assert_eq!(
                        bytes.len(),
                        super::super::QuantType::Q4 { block, sym }
                            .byte_size(rows, cols)
                            .unwrap()
                    );
                    let (codes, params) = planes(&bytes, rows, cols);
                    let nb = cols / block * param_bytes(sym);
                    let mut out = vec![0.0; cols];
                    let mut err = 0.0f64;
                    for r in 0..rows {
                        dequantize_row(
                            &codes[r * cols / 2..(r + 1) * cols / 2],
                            &params[r * nb..(r + 1) * nb],
                            block,
                            sym,
                            &mut out,
                        );
                        for (a, b) in v[r * cols..(r + 1) * cols].iter().zip(&out) {
                            err += ((a - b) as f64).powi(2);
                        }
                    }
                    assert!(
                        (err - st.sum_sq_err).abs() < 1e-9 * err.max(1.0),
                        "report matches decode"
                    );
                    // Uniform data: 4 bits keep the relative RMS error near 1/(15·√3·range/σ).
                    assert!(
                        st.rel_rms < 0.12,
                        "block {block} sym {sym} {method:?}: {}",
                        st.rel_rms
                    );
                }
            }
        }
    }

    #[test]
    fn constant_and_zero_blocks_give_finite_params() {
        // Calibration can give a column no activation at all: zero importance must not divide
        // by zero in the weighted search either.
        let zero_importance = vec![0.0f32; 64];
        for v in [vec![0.0f32; 64], vec![3.25f32; 64], vec![-1e-30f32; 64]] {
            for (sym, method, importance) in [
                (false, Method::Search, None),
                (true, Method::Search, None),
                (false, Method::Rtn, None),
                (true, Method::Rtn, None),
                (false, Method::Search, Some(zero_importance.as_slice())),
                (true, Method::Search, Some(zero_importance.as_slice())),
            ] {
                let Quantized {
                    bytes, error: st, ..
                } = quantize(
                    &v,
                    1,
                    64,
                    Options {
                        block: 64,
                        sym,
                        method,
                        grid: true,
                        importance,
                        compensation: None,
                    },
                );
                let (codes, params) = planes(&bytes, 1, 64);
                let mut out = vec![0.0; 64];
                dequantize_row(codes, params, 64, sym, &mut out);
                assert!(out.iter().all(|x| x.is_finite()));
                assert!(st.rel_rms.is_finite());
                if v[0] == 3.25 && !sym && method == Method::Search {
                    assert!(out.iter().all(|&x| x == 3.25));
                }
            }
        }
    }
}
