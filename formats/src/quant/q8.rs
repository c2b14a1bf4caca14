//! 8-bit symmetric block codec: `w = q · scale`, q in -127..=127 (i8), one f16 scale per block.
//! Layout: codes plane (`rows × cols` bytes), then scales plane (`rows × cols/block` f16).

use super::ErrorStats;
use half::f16;
use rayon::prelude::*;

pub fn dequantize_row(codes: &[u8], scales: &[u8], block: usize, out: &mut [f32]) {
    for (b, (chunk, out)) in codes
        .chunks_exact(block)
        .zip(out.chunks_exact_mut(block))
        .enumerate()
    {
        let s = f16::from_le_bytes([scales[2 * b], scales[2 * b + 1]]).to_f32();
        for (&q, o) in chunk.iter().zip(out.iter_mut()) {
            *o = (q as i8) as f32 * s;
        }
    }
}

/// Round-to-nearest with the scale mapping the largest magnitude to ±127.
pub fn quantize(values: &[f32], rows: usize, cols: usize, block: usize) -> (Vec<u8>, ErrorStats) {
    assert!(cols % block == 0 && values.len() == rows * cols);
    let nb = cols / block;
    let mut codes = vec![0u8; rows * cols];
    let mut scales = vec![0u8; rows * nb * 2];
    let stats = codes
        .par_chunks_mut(cols)
        .zip(scales.par_chunks_mut(nb * 2))
        .enumerate()
        .map(|(r, (crow, srow))| {
            let row = &values[r * cols..(r + 1) * cols];
            let mut st = ErrorStats::default();
            for b in 0..nb {
                let x = &row[b * block..(b + 1) * block];
                let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let scale = f16::from_f32(amax / 127.0);
                let s = scale.to_f32();
                for (i, &v) in x.iter().enumerate() {
                    let q = if s > 0.0 {
                        (v / s).round().clamp(-127.0, 127.0)
                    } else {
                        0.0
                    };
                    crow[b * block + i] = q as i8 as u8;
                    let e = (q * s - v) as f64;
                    st.sum_sq_err += e * e;
                    st.sum_sq += v as f64 * v as f64;
                    st.max_abs = st.max_abs.max(e.abs());
                }
                srow[2 * b..2 * b + 2].copy_from_slice(&scale.to_le_bytes());
            }
            st
        })
        .reduce(ErrorStats::default, |mut a, b| {
            a.merge(&b);
            a
        });
    codes.extend_from_slice(&scales);
    (codes, stats)
}

/// A Q8 block's stored scale as GPTQ's compensated rounding uses it: the nearest code, as
/// [`quantize`] rounds.
#[derive(Clone, Copy, Debug)]
struct Q8Scale(f32);

impl super::gptq::BlockCodec for Q8Scale {
    fn encode(&self, x: f32) -> u8 {
        let q = if self.0 > 0.0 {
            (x / self.0).round().clamp(-127.0, 127.0)
        } else {
            0.0
        };
        q as i8 as u8
    }
    fn decode(&self, q: u8) -> f32 {
        (q as i8) as f32 * self.0
    }
}

/// [`quantize`] with GPTQ's error compensation (`super::gptq`): rows in tiles, each block's
/// scale from its largest magnitude as compensation has left the row, the error measured
/// against the input. An 8-bit code's rounding is small, but the Q8 matrices a size budget
/// keeps are the ones whose error costs most.
pub fn quantize_compensated(
    values: &[f32],
    rows: usize,
    cols: usize,
    block: usize,
    comp: &super::gptq::Compensation,
) -> (Vec<u8>, ErrorStats) {
    use super::gptq::{quantize_tile, TILE};
    assert!(cols % block == 0 && values.len() == rows * cols && comp.cols == cols);
    let nb = cols / block;
    let mut codes = vec![0u8; rows * cols];
    let mut scales = vec![0u8; rows * nb * 2];
    let stats = codes
        .par_chunks_mut(TILE * cols)
        .zip(scales.par_chunks_mut(TILE * nb * 2))
        .zip(values.par_chunks(TILE * cols))
        .map(|((ctile, stile), vtile)| {
            let mut work: Vec<Vec<f32>> = vtile.chunks_exact(cols).map(|r| r.to_vec()).collect();
            let mut st = ErrorStats::default();
            let choose = |_: usize, _: usize, x: &[f32]| {
                let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                Q8Scale(f16::from_f32(amax / 127.0).to_f32())
            };
            quantize_tile(comp, &mut work, block, &choose, &mut |t, b, p, q| {
                ctile[t * cols + b * block..][..block].copy_from_slice(q);
                stile[(t * nb + b) * 2..][..2].copy_from_slice(&f16::from_f32(p.0).to_le_bytes());
                let x = &vtile[t * cols + b * block..][..block];
                for (&v, &code) in x.iter().zip(q) {
                    let e = ((code as i8) as f32 * p.0 - v) as f64;
                    st.sum_sq_err += e * e;
                    st.sum_sq += v as f64 * v as f64;
                    st.max_abs = st.max_abs.max(e.abs());
                }
            });
            st
        })
        .reduce(ErrorStats::default, |mut a, b| {
            a.merge(&b);
            a
        });
    codes.extend_from_slice(&scales);
    (codes, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let (rows, cols) = (3, 128);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let (bytes, st) = quantize(&v, rows, cols, 64);
        assert_eq!(bytes.len(), rows * cols + rows * 2 * 2);
        let (codes, scales) = bytes.split_at(rows * cols);
        let mut out = vec![0.0; cols];
        for r in 0..rows {
            dequantize_row(
                &codes[r * cols..][..cols],
                &scales[r * 4..][..4],
                64,
                &mut out,
            );
            for (a, b) in v[r * cols..][..cols].iter().zip(&out) {
                assert!((a - b).abs() <= 1.0 / 127.0 * 0.51 + 1e-3, "{a} {b}");
            }
        }
        assert!(st.rel_rms < 0.01);
        // Hand-built block: scale 0.5, codes -2, 3 → -1.0, 1.5.
        let mut b = vec![(-2i8) as u8, 3];
        b.extend([0u8; 62]);
        let s = f16::from_f32(0.5).to_le_bytes();
        dequantize_row(&b, &s, 64, &mut out[..64]);
        assert_eq!(&out[..3], &[-1.0, 1.5, 0.0]);
    }

    /// The compensated writer lays its blocks out as the plain one (a diagonal Gram matrix,
    /// nothing to compensate: the same bytes), and with correlated inputs lowers the output
    /// error `‖(w − ŵ)·X‖²`.
    #[test]
    fn compensation_keeps_the_layout_and_lowers_the_output_error() {
        use crate::quant::gptq::testing::{correlated_inputs, gram, output_error, rng};
        use crate::quant::gptq::Compensation;
        let (n, t, rows, block) = (128, 500, 5, 64);
        let mut s = 3u64;
        let w: Vec<f32> = (0..rows * n).map(|_| rng(&mut s)).collect();
        let mut diag = vec![0f64; n * n];
        for i in 0..n {
            diag[i * n + i] = 1.0 + i as f64;
        }
        let c = Compensation::from_gram(&diag, n, 10_000).unwrap();
        assert_eq!(
            quantize(&w, rows, n, block).0,
            quantize_compensated(&w, rows, n, block, &c).0
        );
        let x = correlated_inputs(&mut s, t, n, 0.9, None);
        let c = Compensation::from_gram(&gram(&x, n), n, t).unwrap();
        let out_err = |bytes: &[u8]| -> f64 {
            let (codes, scales) = bytes.split_at(rows * n);
            let nb = n / block;
            let mut back = vec![0.0; rows * n];
            for (r, o) in back.chunks_exact_mut(n).enumerate() {
                dequantize_row(
                    &codes[r * n..][..n],
                    &scales[r * nb * 2..][..nb * 2],
                    block,
                    o,
                );
            }
            output_error(&w, &back, &x, n)
        };
        let (plain, comp) = (
            quantize(&w, rows, n, block).0,
            quantize_compensated(&w, rows, n, block, &c).0,
        );
        let (a, b) = (out_err(&plain), out_err(&comp));
        assert!(b < 0.8 * a, "{b} compensated against {a}");
    }

    #[test]
    fn zero_constant_and_tiny_blocks_give_finite_scales() {
        for v in [
            vec![0.0f32; 64],
            vec![3.25f32; 64],
            vec![-1e-30f32; 64],
            vec![6e4f32; 64],
        ] {
            let (bytes, st) = quantize(&v, 1, 64, 64);
            let mut out = vec![0.0; 64];
            dequantize_row(&bytes[..64], &bytes[64..66], 64, &mut out);
            assert!(out.iter().all(|x| x.is_finite()), "{v:?}");
            assert!(st.rel_rms.is_finite());
        }
    }
}
