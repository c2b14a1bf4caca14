//! ggml's reference quantizers for the GGUF export: Q8_0, Q4_0, Q4_1 (blocks of 32), as
//! `quantize_row_*_ref` in ggml-quants.c define them, so llama.cpp reads back what it would
//! have written itself.

use super::ggml::GgmlType;
use half::f16;

/// Encodes `x` (a whole number of rows; length a multiple of 32 for block types).
pub fn quantize(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) {
    match ty {
        GgmlType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 => x.chunks_exact(32).for_each(|b| q8_0(b, out)),
        GgmlType::Q4_0 => x.chunks_exact(32).for_each(|b| q4_0(b, out)),
        GgmlType::Q4_1 => x.chunks_exact(32).for_each(|b| q4_1(b, out)),
        other => unreachable!("no exporter for {}", other.name()),
    }
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    // roundf: half away from zero.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let max = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    for j in 0..16 {
        let lo = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let hi = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        out.push(lo | (hi << 4));
    }
}

fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, max) = x
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
    for j in 0..16 {
        let lo = (((x[j] - min) * id + 0.5) as u8).min(15);
        let hi = (((x[j + 16] - min) * id + 0.5) as u8).min(15);
        out.push(lo | (hi << 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::ggml::dequantize;

    #[test]
    fn round_trips_within_half_a_step() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        for (ty, tol) in [
            (GgmlType::Q8_0, 1.3 / 127.0),
            // The largest magnitude maps to −8·d: the other sign clips by up to one step.
            (GgmlType::Q4_0, 2.0 * 1.3 / 8.0),
            (GgmlType::Q4_1, 2.6 / 15.0),
        ] {
            let mut b = Vec::new();
            quantize(ty, &x, &mut b);
            assert_eq!(b.len() as u64, ty.bytes_for(256).unwrap());
            let mut y = vec![0.0; 256];
            dequantize(ty, &b, &mut y);
            for (a, c) in x.iter().zip(&y) {
                assert!(
                    (a - c).abs() <= tol * 0.51 * 1.25 + 1e-3,
                    "{}: {a} vs {c}",
                    ty.name()
                );
            }
        }
    }
}
