//! ggml tensor types and their reference dequantization, written from ggml's definitions
//! (`ggml-quants.c`, `dequantize_row_*`). Blocks are self-contained: a row of a matrix is a
//! whole number of blocks.

use half::f16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
    /// 4-bit codes into a fixed non-uniform table ([`IQ4NL_VALUES`]), one f16 scale per 32.
    IQ4NL,
    /// IQ4_NL's table in super-blocks of 256: an f16 scale and a 6-bit scale per 32.
    IQ4XS,
}

/// The 16 values IQ4_NL and IQ4_XS codes index (ggml's `kvalues_iq4nl`).
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

impl GgmlType {
    /// Whether pocket writes this type with its own weighted scale search, and so with
    /// `--gptq`'s compensation (ggml's 5-bit and IQ4 types; Q4_0/Q4_1/Q8_0 are written as
    /// llama-quantize writes them, or from pocket's own Q4/Q8 blocks).
    pub fn is_searched(self) -> bool {
        matches!(
            self,
            GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::IQ4NL | GgmlType::IQ4XS
        )
    }

    pub fn from_id(id: u32) -> Option<GgmlType> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            20 => GgmlType::IQ4NL,
            23 => GgmlType::IQ4XS,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::IQ4NL => 20,
            GgmlType::IQ4XS => 23,
            GgmlType::BF16 => 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::IQ4NL => "IQ4_NL",
            GgmlType::IQ4XS => "IQ4_XS",
        }
    }

    /// The type named `name` (as [`GgmlType::name`], any case).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        (0..=30)
            .filter_map(GgmlType::from_id)
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// (elements per block, bytes per block)
    pub fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::IQ4NL => (32, 18),
            GgmlType::IQ4XS => (256, 136),
        }
    }

    /// Bytes of `n` elements, if `n` is a whole number of blocks (checked arithmetic).
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let (be, bb) = self.block();
        (n % be as u64 == 0).then_some(())?;
        (n / be as u64).checked_mul(bb as u64)
    }
}

/// IQ4_XS: sub-block `ib`'s 6-bit scale (4 low bits in `scales_l`, 2 high in `scales_h`).
pub(crate) fn iq4xs_scale(scales_h: u16, scales_l: &[u8], ib: usize) -> i32 {
    (((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) as u16 | (((scales_h >> (2 * ib)) & 3) << 4))
        as i32
}

pub(crate) fn h(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Dequantizes `out.len()` elements (a whole number of blocks) from `data`.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) {
    let (be, bb) = ty.block();
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            return;
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
            return;
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
            return;
        }
        _ => {}
    }
    for (b, y) in data.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        match ty {
            GgmlType::Q4_0 => {
                let d = h(b, 0);
                for j in 0..16 {
                    y[j] = ((b[2 + j] & 0x0F) as i32 - 8) as f32 * d;
                    y[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
                }
            }
            GgmlType::Q4_1 => {
                let (d, m) = (h(b, 0), h(b, 2));
                for j in 0..16 {
                    y[j] = (b[4 + j] & 0x0F) as f32 * d + m;
                    y[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
                }
            }
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let sym = ty == GgmlType::Q5_0;
                let d = h(b, 0);
                let (m, o) = if sym { (0.0, 2) } else { (h(b, 2), 4) };
                let qh = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
                let qs = &b[o + 4..o + 20];
                for j in 0..16 {
                    let xh0 = (((qh >> j) << 4) & 0x10) as i32;
                    let xh1 = ((qh >> (j + 12)) & 0x10) as i32;
                    let x0 = (qs[j] & 0x0F) as i32 | xh0;
                    let x1 = (qs[j] >> 4) as i32 | xh1;
                    if sym {
                        y[j] = (x0 - 16) as f32 * d;
                        y[j + 16] = (x1 - 16) as f32 * d;
                    } else {
                        y[j] = x0 as f32 * d + m;
                        y[j + 16] = x1 as f32 * d + m;
                    }
                }
            }
            GgmlType::Q8_0 => {
                let d = h(b, 0);
                for j in 0..32 {
                    y[j] = (b[2 + j] as i8) as f32 * d;
                }
            }
            GgmlType::IQ4NL => {
                let d = h(b, 0);
                for j in 0..16 {
                    y[j] = d * IQ4NL_VALUES[(b[2 + j] & 0x0F) as usize] as f32;
                    y[j + 16] = d * IQ4NL_VALUES[(b[2 + j] >> 4) as usize] as f32;
                }
            }
            GgmlType::IQ4XS => {
                let d = h(b, 0);
                let (scales_h, scales_l) = (u16::from_le_bytes([b[2], b[3]]), &b[4..8]);
                for ib in 0..8 {
                    let dl = d * (iq4xs_scale(scales_h, scales_l, ib) - 32) as f32;
                    let (qs, y) = (&b[8 + 16 * ib..][..16], &mut y[32 * ib..][..32]);
                    for j in 0..16 {
                        y[j] = dl * IQ4NL_VALUES[(qs[j] & 0x0F) as usize] as f32;
                        y[j + 16] = dl * IQ4NL_VALUES[(qs[j] >> 4) as usize] as f32;
                    }
                }
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                let (d, dmin) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let (qh, mut ql) = if ty == GgmlType::Q5K {
                    (Some(&b[16..48]), &b[48..176])
                } else {
                    (None, &b[16..144])
                };
                let (mut u1, mut u2) = (1u8, 2u8);
                let mut is = 0;
                for j in (0..256).step_by(64) {
                    let (sc1, m1) = scale_min_k4(is, scales);
                    let (sc2, m2) = scale_min_k4(is + 1, scales);
                    let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
                    let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
                    for l in 0..32 {
                        let hi1 = qh.map_or(0, |qh| if qh[l] & u1 != 0 { 16 } else { 0 });
                        let hi2 = qh.map_or(0, |qh| if qh[l] & u2 != 0 { 16 } else { 0 });
                        y[j + l] = d1 * ((ql[l] & 0x0F) + hi1) as f32 - m1;
                        y[j + 32 + l] = d2 * ((ql[l] >> 4) + hi2) as f32 - m2;
                    }
                    ql = &ql[32..];
                    is += 2;
                    u1 <<= 2;
                    u2 <<= 2;
                }
            }
            GgmlType::Q6K => {
                let (ql_all, qh_all, sc_all) = (&b[0..128], &b[128..192], &b[192..208]);
                let d = h(b, 208);
                for n in 0..2 {
                    let (ql, qh, sc) = (&ql_all[n * 64..], &qh_all[n * 32..], &sc_all[n * 8..]);
                    let y = &mut y[n * 128..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
            }
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => unreachable!("handled above"),
        }
    }
}

/// The 6-bit scale and min of sub-block `j` in a K-quant's 12 packed scale bytes.
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}
