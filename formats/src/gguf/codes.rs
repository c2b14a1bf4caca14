//! ggml's quantized blocks as integer codes and per-block parameters, so the engine can carry
//! a GGUF's weights into its packed kernel layouts without changing a single value.
//!
//! Every quantized type below decodes, in ggml's own arithmetic, as
//! `(code − offset) · scale + zero` in f32 over sub-blocks of [`CodeForm::block`] weights:
//! - Q4_0 `(q − 8)·d`, Q5_0 `(q − 16)·d` and Q6_K `(d·sc)·(q − 32)` are symmetric (the zero is
//!   −0.0, which leaves the bare product bit for bit);
//! - Q4_1 / Q5_1 `q·d + m` and Q4_K / Q5_K `(d·sc)·q − dmin·m` have offset 0 and a zero;
//! - IQ4_NL `d·T[q]` and IQ4_XS `(d·(ls − 32))·T[q]` index ggml's fixed non-uniform table
//!   `T` ([`IQ4NL_VALUES`]): their form carries the table ([`CodeForm::table`]) and offset 0,
//!   so a weight is `T[q]·scale + zero`, with the zero −0.0;
//! - Q8_0 `q·d` stays as it is (the engine's Q8 layout already holds it).
//!
//! K-quants' sub-block scale `d·sc` is an f32 product, not an f16, so they need f32
//! parameters ([`CodeForm::wide`]); the others keep their f16 ones. The test below checks
//! that the form reproduces [`super::ggml::dequantize`] bit for bit on random blocks.

use super::ggml::{h, iq4xs_scale, scale_min_k4, GgmlType, IQ4NL_VALUES};

/// How one ggml type's blocks map onto codes and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeForm {
    /// Weights per scale (a K-quant's sub-block).
    pub block: usize,
    /// Subtracted from every code before the scale multiplies.
    pub offset: u8,
    /// Bits per code: 4, 5 or 6.
    pub bits: u8,
    /// Whether blocks carry a zero (otherwise it is −0.0).
    pub has_zero: bool,
    /// Whether the parameters need f32 (K-quants); otherwise they are exact f16 values.
    pub wide: bool,
    /// The non-uniform value of each 4-bit code (IQ4_NL, IQ4_XS); `None` for the linear
    /// types, whose value is `code − offset`.
    pub table: Option<[i8; 16]>,
}

impl CodeForm {
    /// The value a code stands for, before the scale multiplies.
    #[inline]
    pub fn value(&self, code: u8) -> f32 {
        match &self.table {
            Some(t) => t[(code & 0x0F) as usize] as f32,
            None => code as f32 - self.offset as f32,
        }
    }
}

/// Every type with a [`form`].
pub const TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
];

/// The code form of `ty`, for the types that have one (not F32/F16/BF16 or Q8_0).
pub fn form(ty: GgmlType) -> Option<CodeForm> {
    let f = |block, offset, bits, has_zero, wide| CodeForm {
        block,
        offset,
        bits,
        has_zero,
        wide,
        table: None,
    };
    let table = |wide| CodeForm {
        table: Some(IQ4NL_VALUES),
        ..f(32, 0, 4, false, wide)
    };
    Some(match ty {
        GgmlType::Q4_0 => f(32, 8, 4, false, false),
        GgmlType::Q4_1 => f(32, 0, 4, true, false),
        GgmlType::Q5_0 => f(32, 16, 5, false, false),
        GgmlType::Q5_1 => f(32, 0, 5, true, false),
        GgmlType::Q4K => f(32, 0, 4, true, true),
        GgmlType::Q5K => f(32, 0, 5, true, true),
        GgmlType::Q6K => f(16, 32, 6, false, true),
        GgmlType::IQ4NL => table(false),
        // ggml: `dl = d·(ls − 32)` in f32, so the scale needs f32.
        GgmlType::IQ4XS => table(true),
        _ => return None,
    })
}

/// Unpacks one row of `ty` blocks: `codes[i]` for every weight, and per sub-block of
/// [`CodeForm::block`] its `scale` and `zero` (−0.0 for symmetric types). `data` holds a whole
/// number of ggml blocks covering `codes.len()` weights.
///
/// # Panics
/// When `ty` has no [`form`] or the slices do not match.
pub fn unpack(ty: GgmlType, data: &[u8], codes: &mut [u8], scale: &mut [f32], zero: &mut [f32]) {
    let cf = form(ty).expect("a type with a code form");
    let (be, bb) = ty.block();
    let n = codes.len();
    assert!(n % be == 0 && data.len() == n / be * bb);
    assert!(scale.len() == n / cf.block && zero.len() == n / cf.block);
    let per = be / cf.block;
    for (i, b) in data.chunks_exact(bb).enumerate() {
        let c = &mut codes[i * be..][..be];
        let s = &mut scale[i * per..][..per];
        let z = &mut zero[i * per..][..per];
        match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let o = if ty == GgmlType::Q4_0 { 2 } else { 4 };
                s[0] = h(b, 0);
                z[0] = if ty == GgmlType::Q4_1 { h(b, 2) } else { -0.0 };
                for j in 0..16 {
                    c[j] = b[o + j] & 0x0F;
                    c[j + 16] = b[o + j] >> 4;
                }
            }
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let sym = ty == GgmlType::Q5_0;
                let o = if sym { 2 } else { 4 };
                s[0] = h(b, 0);
                z[0] = if sym { -0.0 } else { h(b, 2) };
                let qh = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
                let qs = &b[o + 4..o + 20];
                for j in 0..16 {
                    c[j] = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10) as u8;
                    c[j + 16] = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10) as u8;
                }
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                let (d, dmin) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let (qh, ql) = if ty == GgmlType::Q5K {
                    (Some(&b[16..48]), &b[48..176])
                } else {
                    (None, &b[16..144])
                };
                for q in 0..4 {
                    for half in 0..2 {
                        let sub = 2 * q + half;
                        let (sc, m) = scale_min_k4(sub, scales);
                        // ggml: `d1 = d·sc`, `m1 = dmin·m`, `y = d1·q − m1`.
                        s[sub] = d * sc as f32;
                        z[sub] = -(dmin * m as f32);
                        for l in 0..32 {
                            let byte = ql[q * 32 + l];
                            let lo = if half == 0 { byte & 0x0F } else { byte >> 4 };
                            let hi = qh.map_or(0, |qh| ((qh[l] >> sub) & 1) << 4);
                            c[sub * 32 + l] = lo | hi;
                        }
                    }
                }
            }
            GgmlType::Q6K => {
                let (ql_all, qh_all, sc_all) = (&b[0..128], &b[128..192], &b[192..208]);
                let d = h(b, 208);
                for nh in 0..2 {
                    let (ql, qh) = (&ql_all[nh * 64..], &qh_all[nh * 32..]);
                    let c = &mut c[nh * 128..];
                    for l in 0..32 {
                        c[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
                        c[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
                        c[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                        c[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                    }
                }
                // ggml: `y = d·sc·q` evaluated left to right, so the scale is `d·sc` in f32.
                for (j, s) in s.iter_mut().enumerate() {
                    *s = d * (sc_all[j] as i8) as f32;
                }
                z.fill(-0.0);
            }
            GgmlType::IQ4NL => {
                s[0] = h(b, 0);
                z[0] = -0.0;
                for j in 0..16 {
                    c[j] = b[2 + j] & 0x0F;
                    c[j + 16] = b[2 + j] >> 4;
                }
            }
            GgmlType::IQ4XS => {
                // d (f16), scales_h (u16: the 2 high bits of each sub-block's 6-bit scale),
                // scales_l (4 bytes: the 4 low bits, two per byte), then 128 bytes of codes.
                let d = h(b, 0);
                let sh = u16::from_le_bytes([b[2], b[3]]);
                for (sub, s) in s.iter_mut().enumerate() {
                    *s = d * (iq4xs_scale(sh, &b[4..8], sub) - 32) as f32;
                    let qs = &b[8 + sub * 16..][..16];
                    for j in 0..16 {
                        c[sub * 32 + j] = qs[j] & 0x0F;
                        c[sub * 32 + 16 + j] = qs[j] >> 4;
                    }
                }
                z.fill(-0.0);
            }
            _ => unreachable!("types with a code form"),
        }
    }
}

/// One weight as the form decodes it (the definition the kernels and the test share).
#[inline]
pub fn decode(form: &CodeForm, code: u8, scale: f32, zero: f32) -> f32 {
    form.value(code) * scale + zero
}

/// Pseudo-random blocks of `ty` whose f16 fields are finite, of either sign, zeros included:
/// test data for the codes' and kernels' checks (here and in the engine).
#[doc(hidden)]
pub fn sample_blocks(ty: GgmlType, n: usize, seed: &mut u64) -> Vec<u8> {
    let (_, bb) = ty.block();
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as u32
    };
    let mut out = Vec::new();
    for i in 0..n {
        let mut b: Vec<u8> = (0..bb).map(|_| next() as u8).collect();
        let mut put = |at: usize, r: u32| {
            let v = match i % 7 {
                0 => 0.0,
                1 => -0.0,
                _ => (r % 20000) as f32 / 1e5 * if r & 1 == 0 { 1.0 } else { -1.0 },
            };
            b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        };
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 => put(0, next()),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => {
                put(0, next());
                put(2, next());
            }
            GgmlType::Q6K => put(208, next()),
            GgmlType::IQ4NL | GgmlType::IQ4XS => put(0, next()),
            GgmlType::Q8_0 => put(0, next()),
            _ => unreachable!("a quantized type"),
        }
        out.extend(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn forms_reproduce_ggml_dequantize_bit_for_bit() {
        let mut seed = 7;
        for ty in TYPES {
            let cf = form(ty).unwrap();
            let (be, _) = ty.block();
            let nblocks = 3 * 256 / be + 1;
            let data = sample_blocks(ty, nblocks, &mut seed);
            let n = nblocks * be;
            let mut want = vec![0.0f32; n];
            super::super::ggml::dequantize(ty, &data, &mut want);
            let (mut c, mut s, mut z) = (
                vec![0u8; n],
                vec![0.0; n / cf.block],
                vec![0.0; n / cf.block],
            );
            unpack(ty, &data, &mut c, &mut s, &mut z);
            assert!(c.iter().all(|&c| c < 1 << cf.bits), "{ty:?}: code range");
            if !cf.has_zero {
                assert!(
                    z.iter().all(|z| z.to_bits() == (-0.0f32).to_bits()),
                    "{ty:?}"
                );
            }
            if !cf.wide {
                let exact = |v: &f32| f16::from_f32(*v).to_f32().to_bits() == v.to_bits();
                assert!(
                    s.iter().all(exact) && z.iter().all(exact),
                    "{ty:?}: f16 params"
                );
            }
            for (i, w) in want.iter().enumerate() {
                let b = i / cf.block;
                let got = decode(&cf, c[i], s[b], z[b]);
                assert_eq!(
                    got.to_bits(),
                    w.to_bits(),
                    "{ty:?} weight {i}: {got} vs {w}"
                );
            }
        }
    }
}
