//! Sections of `llm.mnn.weight`: the int4 linear blob MNN's `ConvolutionCommon` reads, and
//! f32 vectors (norm weights). Our `.pocket` Q4 uses MNN's own codec (codes high nibble
//! first, f16 `(zero, scale)` pairs, `w = (q − 8)·scale + zero`), so codes and pairs are
//! copied byte for byte, and so are symmetric blocks' scales (`w = (q − 8)·scale`).

/// The 4-bit linear header: `u8` ndim 2, the shape `[oc, ic]` (u16 each, or u32 when either
/// exceeds 65535: then `IDSTQuan.shapeInt32` must be set), `u8` 16 and the code map −8..7.
pub fn conv_header(oc: usize, ic: usize) -> Vec<u8> {
    let mut h = vec![2u8];
    if shape_i32(oc, ic) {
        h.extend_from_slice(&(oc as u32).to_le_bytes());
        h.extend_from_slice(&(ic as u32).to_le_bytes());
    } else {
        h.extend_from_slice(&(oc as u16).to_le_bytes());
        h.extend_from_slice(&(ic as u16).to_le_bytes());
    }
    h.push(16);
    h.extend((-8i8..8).map(|v| v as u8));
    h
}

/// Whether the header's shape is stored as u32.
pub fn shape_i32(oc: usize, ic: usize) -> bool {
    oc > 65535 || ic > 65535
}

/// f32 values as little-endian bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_the_size_mnn_expects() {
        // 1 + 2·2 + 1 + 16: `getQuantBitFromExternalFile` derives the bit width from it.
        assert_eq!(conv_header(896, 4864).len(), 22);
        assert_eq!(conv_header(65536, 896).len(), 26);
        let h = conv_header(3, 64);
        assert_eq!(&h[..6], &[2, 3, 0, 64, 0, 16]);
        assert_eq!(h[6] as i8, -8);
        assert_eq!(h[21] as i8, 7);
    }
}
