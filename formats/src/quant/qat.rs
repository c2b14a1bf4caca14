//! Exact import of weights that already lie on a 4-bit grid (quantization-aware training leaves
//! them "fake-quantized" in bf16/f16/f32). For such a block we find f16 parameters under which
//! every value decodes back to itself bit for bit, so storing it as Q4 loses nothing.

use super::params::BlockParams;
use half::f16;

/// Up to 16 distinct values of the block (in first-seen order), or `None` if it has more —
/// the cheap test that rejects ordinary (non-grid) blocks after ~17 values.
fn distinct16(x: &[f32]) -> Option<Vec<f32>> {
    let mut seen: Vec<f32> = Vec::with_capacity(16);
    for &v in x {
        if !seen.iter().any(|s| s.to_bits() == v.to_bits()) {
            if seen.len() == 16 || !v.is_finite() {
                return None;
            }
            seen.push(v);
        }
    }
    Some(seen)
}

fn exact(x: &[f32], p: BlockParams) -> bool {
    let c = p.widen();
    p.scale.is_finite()
        && p.zero.is_finite()
        && x.iter()
            .all(|&v| c.decode(c.encode(v)).to_bits() == v.to_bits())
}

/// Parameters that reproduce `x` exactly, if the block lies on a 4-bit grid our format can
/// express (f16 scale and zero).
pub fn grid_params(x: &[f32], sym: bool) -> Option<BlockParams> {
    let values = distinct16(x)?;
    let min = values.iter().copied().fold(f32::INFINITY, f32::min);
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if sym {
        let amax = min.abs().max(max.abs());
        if amax == 0.0 {
            return Some(BlockParams::ZERO);
        }
        for k in 1..=8 {
            for sign in [1.0f32, -1.0] {
                let p = BlockParams {
                    scale: f16::from_f32(sign * amax / k as f32),
                    zero: f16::ZERO,
                };
                if exact(x, p) {
                    return Some(p);
                }
            }
        }
        return None;
    }
    if max == min {
        let p = BlockParams {
            scale: f16::ZERO,
            zero: f16::from_f32(min),
        };
        return exact(x, p).then_some(p);
    }
    // The range spans k steps of the scale; the lowest value sits at code q_min.
    for k in (values.len() - 1).max(1)..=15 {
        let scale = f16::from_f32((max - min) / k as f32);
        for q_min in 0..=(15 - k) {
            let zero = f16::from_f32(min - (q_min as f32 - 8.0) * scale.to_f32());
            let p = BlockParams { scale, zero };
            if exact(x, p) {
                return Some(p);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_grids_and_rejects_noise() {
        let scale = f16::from_f32(3.0 / 256.0);
        let zero = f16::from_f32(5.0 * 3.0 / 256.0);
        let p = BlockParams { scale, zero };
        let x: Vec<f32> = (0..64).map(|i| p.decode(((i * 7) % 16) as u8)).collect();
        let found = grid_params(&x, false).expect("on the grid");
        assert!(x.iter().all(|&v| found.decode(found.encode(v)) == v));
        // Codes 3..=12 only: the grid is still found.
        let y: Vec<f32> = (0..64).map(|i| p.decode(3 + (i % 10) as u8)).collect();
        assert!(grid_params(&y, false).is_some());
        // Symmetric grid.
        let s = BlockParams {
            scale: f16::from_f32(-0.125),
            zero: f16::ZERO,
        };
        let z: Vec<f32> = (0..64).map(|i| s.decode((i % 16) as u8)).collect();
        assert!(grid_params(&z, true).is_some());
        // Noise is rejected.
        let mut n = x.clone();
        n[5] += 1e-4;
        assert!(grid_params(&n, false).is_none());
        let r: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        assert!(grid_params(&r, false).is_none());
    }
}
