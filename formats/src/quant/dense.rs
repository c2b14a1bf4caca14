//! F32, F16 and BF16: little-endian element encodings.

use half::{bf16, f16};

pub fn encode_f32(values: &[f32], out: &mut Vec<u8>) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

pub fn encode_f16(values: &[f32], out: &mut Vec<u8>) {
    for v in values {
        out.extend_from_slice(&f16::from_f32(*v).to_le_bytes());
    }
}

/// Round-to-nearest-even, as torch's `.to(torch.bfloat16)`.
pub fn encode_bf16(values: &[f32], out: &mut Vec<u8>) {
    for v in values {
        out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes());
    }
}

pub fn decode_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub fn decode_f16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

pub fn decode_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let v: Vec<f32> = (0..257)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
            .collect();
        let mut b = Vec::new();
        encode_f32(&v, &mut b);
        let mut out = vec![0.0; v.len()];
        decode_f32(&b, &mut out);
        assert_eq!(out, v);
        for (enc, dec, tol) in [
            (
                encode_f16 as fn(&[f32], &mut Vec<u8>),
                decode_f16 as fn(&[u8], &mut [f32]),
                1e-3,
            ),
            (encode_bf16, decode_bf16, 8e-3),
        ] {
            b.clear();
            enc(&v, &mut b);
            dec(&b, &mut out);
            for (a, o) in v.iter().zip(&out) {
                assert!((a - o).abs() <= tol * a.abs().max(1.0), "{a} vs {o}");
            }
            // Values already on the grid survive exactly.
            let mut again = Vec::new();
            enc(&out, &mut again);
            assert_eq!(again, b);
        }
    }
}
