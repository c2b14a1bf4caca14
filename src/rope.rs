//! Rotary position embedding in the half-split ("NeoX") layout transformers uses for Llama and
//! Qwen: element `i` of a head rotates with element `i + head_dim/2`.
//!
//! Inverse frequencies are computed in f32 exactly as transformers does (`1 / theta^(2i/d)`,
//! then the scaling rule), so angles match the reference bit for bit at small positions.

use pocket_formats::hf::RopeConfig;

pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    pub fn new(cfg: &RopeConfig, head_dim: usize) -> Rope {
        Rope {
            inv_freq: cfg.inv_freq(head_dim),
        }
    }

    /// Rotates every head in `x` (heads laid out one after another) to position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        self.apply_pair(x, &mut [], head_dim, pos)
    }

    /// Rotates the heads of a token's queries and keys to `pos`: the angles' sines and cosines
    /// are computed once for both (the same values, bit for bit, as per head).
    pub fn apply_pair(&self, q: &mut [f32], k: &mut [f32], head_dim: usize, pos: usize) {
        let half = head_dim / 2;
        let p = pos as f32;
        let mut sc = [(0.0f32, 0.0f32); 512]; // head_dim ≤ 1024 (ModelSpec checks)
        let sc = &mut sc[..half];
        for (i, v) in sc.iter_mut().enumerate() {
            *v = (p * self.inv_freq[i]).sin_cos();
        }
        for head in q
            .chunks_exact_mut(head_dim)
            .chain(k.chunks_exact_mut(head_dim))
        {
            let (lo, hi) = head.split_at_mut(half);
            for ((a, b), &(sin, cos)) in lo.iter_mut().zip(hi.iter_mut()).zip(sc.iter()) {
                let (x, y) = (*a, *b);
                *a = x * cos - y * sin;
                *b = y * cos + x * sin;
            }
        }
    }

    /// Rotates every head in `x` by `delta` positions (negative: back), angles in f64: a
    /// cached key moved from position `p` to `p + delta` (a context shift). Rotations compose,
    /// so this equals rotating the unrotated key to the new position, up to rounding.
    pub fn rotate_by(&self, x: &mut [f32], head_dim: usize, delta: i64) {
        let half = head_dim / 2;
        let sc: Vec<(f32, f32)> = self.inv_freq[..half]
            .iter()
            .map(|&f| {
                let (s, c) = (delta as f64 * f as f64).sin_cos();
                (s as f32, c as f32)
            })
            .collect();
        for head in x.chunks_exact_mut(head_dim) {
            let (lo, hi) = head.split_at_mut(half);
            for ((a, b), &(sin, cos)) in lo.iter_mut().zip(hi.iter_mut()).zip(&sc) {
                let (x, y) = (*a, *b);
                *a = x * cos - y * sin;
                *b = y * cos + x * sin;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pocket_formats::hf::RopeScaling;

    #[test]
    fn position_zero_is_identity_and_rotation_keeps_norm() {
        let rope = Rope::new(
            &RopeConfig {
                theta: 10000.0,
                scaling: RopeScaling::None,
            },
            8,
        );
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.3 - 2.0).collect();
        let mut x = orig.clone();
        rope.apply(&mut x, 8, 0);
        assert_eq!(x, orig);
        rope.apply(&mut x, 8, 123);
        let n0: f32 = orig.iter().map(|v| v * v).sum();
        let n1: f32 = x.iter().map(|v| v * v).sum();
        assert!((n0 - n1).abs() < 1e-3);
    }
}
