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
