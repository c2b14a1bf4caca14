//! Element-wise operations of the decoder, in plain f32: the portable floor of the kernels.
//! These are the scalar definitions the SIMD kernels reproduce (norm.rs dispatches RMSNorm
//! over them; dense.rs and the f32 mat-vec fall back to `dot`).

/// RMSNorm as transformers computes it: `w * (x / sqrt(mean(x²) + eps))`, all in f32.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), weight.len());
    let mean_sq = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (mean_sq + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = w * (v * inv);
    }
}

/// RMSNorm in place (used per head for Qwen3's q_norm / k_norm).
pub fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let mean_sq = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (mean_sq + eps).sqrt();
    for (v, &w) in x.iter_mut().zip(weight) {
        *v = w * (*v * inv);
    }
}

/// Numerically stable softmax in place.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums: the compiler vectorises this, and the order is fixed so results
    // are reproducible run to run.
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for i in 0..chunks {
        for l in 0..8 {
            acc[l] += a[i * 8 + l] * b[i * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut x = vec![1.0, 3.0, -2.0, 8.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] > 0.99 && x[1] > x[0] && x[0] > x[2]);
        // Large logits must not overflow.
        let mut y = vec![1000.0, 1000.0];
        softmax(&mut y);
        assert_eq!(y, vec![0.5, 0.5]);
    }

    #[test]
    fn rms_norm_unit_weight_gives_unit_rms() {
        let x: Vec<f32> = (0..17).map(|i| i as f32 - 8.0).collect();
        let mut out = vec![0.0; 17];
        rms_norm(&x, &[1.0; 17], 0.0, &mut out);
        let rms = (out.iter().map(|v| v * v).sum::<f32>() / 17.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-5);
    }

    #[test]
    fn dot_matches_naive_on_odd_lengths() {
        for n in [0, 1, 7, 8, 9, 31, 100] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - naive).abs() < 1e-4, "n={n}");
        }
    }
}
