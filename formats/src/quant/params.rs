//! A Q4 block's parameters (scale and zero point) and the one definition of its decode and
//! nearest-code encode, shared by the codec (`q4.rs`), the scale search (`search.rs`) and the
//! QAT grid detection (`qat.rs`).

use half::f16;

/// The stored parameters of one block (zero is 0 for symmetric blocks).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockParams {
    pub scale: f16,
    pub zero: f16,
}

impl BlockParams {
    pub const ZERO: BlockParams = BlockParams {
        scale: f16::ZERO,
        zero: f16::ZERO,
    };

    /// The parameters widened to f32 once, for loops over a block.
    #[inline]
    pub fn widen(self) -> Codec {
        let s = self.scale.to_f32();
        let usable = s != 0.0 && s.is_finite();
        // A zero point of 0 is added as −0.0, which leaves every value bit-identical to the
        // bare product (x + −0 = x even for x = −0), as in ggml's Q4_0 and symmetric schemes.
        let z = self.zero.to_f32();
        Codec {
            s,
            z: if z == 0.0 { -0.0 } else { z },
            inv: if usable { 1.0 / s } else { 0.0 },
        }
    }

    pub fn decode(self, q: u8) -> f32 {
        self.widen().decode(q)
    }

    pub fn encode(self, x: f32) -> u8 {
        self.widen().encode(x)
    }
}

/// A block's parameters in f32: the decode definition and the nearest-code encoder.
#[derive(Clone, Copy, Debug)]
pub struct Codec {
    s: f32,
    z: f32,
    inv: f32,
}

impl Codec {
    #[inline]
    pub fn decode(self, q: u8) -> f32 {
        (q as i32 - 8) as f32 * self.s + self.z
    }

    /// The nearest code for `x`.
    #[inline]
    pub fn encode(self, x: f32) -> u8 {
        if self.inv == 0.0 {
            return 8;
        }
        // Round half up by truncating a non-negative value (no libm call, so it vectorises).
        let q = ((x - self.z) * self.inv + 8.5).clamp(0.0, 15.0) as u8;
        // The reciprocal can put a value just across a midpoint: take the truly nearest.
        let mut best = q;
        let mut err = (self.decode(q) - x).abs();
        for c in [q.saturating_sub(1), (q + 1).min(15)] {
            let e = (self.decode(c) - x).abs();
            if e < err {
                best = c;
                err = e;
            }
        }
        best
    }
}
