//! aarch64 versions of the kernels: baseline Advanced SIMD (NEON, every ARMv8-A), the
//! dot-product extension (`sdot`, ARMv8.2) and the int8 matrix multiply (`smmla`, ARMv8.6).
//! The dispatchers in `kernels/` call them only with a [`Cpu`](super::Cpu) token whose level
//! run-time detection found, so the instructions exist.
//!
//! NEON intrinsics are stable Rust; `vdotq_s32`/`vmmlaq_s32` are not (Rust 1.96), so `sdot`
//! and `smmla` are written with `asm!` in the one place below, inside functions compiled with
//! `#[target_feature(enable = "dotprod")]` / `"i8mm"`. f16 values widen with `fcvtl` (ARMv8
//! base): the kernels accumulate in f32 on every level, as the scalar twins do (f16
//! arithmetic would round each partial sum to 11 bits; these loops are bandwidth-bound).
//!
//! The int8 kernels are generic over [`Dot`], the one operation that differs between NEON and
//! dotprod: "add the dot products of each 4-byte lane of `c` with 4-byte lane `L` of `x`".

pub(crate) mod act;
pub(crate) mod attn;
pub(crate) mod dense;
pub(crate) mod gate;
pub(crate) mod lora;
pub(crate) mod norm;
pub(crate) mod q4p;
pub(crate) mod q4p_f32;
pub(crate) mod q4p_mmla;
pub(crate) mod q8p;
pub(crate) mod q8p_f32;

use std::arch::aarch64::*;

/// The tiling every packed int8 kernel here shares: for each group of 16 rows in
/// `first..first + count`, the `n` tokens in tiles of the widest width in `widths` (widest
/// first, ending in 1) that is left; `f(g, col, t0, width)` with `col` the group's first output
/// within each token's `count`.
#[inline(always)]
pub(crate) fn each_tile(
    first: usize,
    count: usize,
    n: usize,
    widths: &[usize],
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    use crate::interleave::GROUP;
    for g in first / GROUP..(first + count) / GROUP {
        let mut t0 = 0;
        while t0 < n {
            let w = *widths
                .iter()
                .find(|&&w| w <= n - t0)
                .expect("widths end in 1");
            f(g, g * GROUP - first, t0, w);
            t0 += w;
        }
    }
}

/// `acc[j] += Σ_{i<4} c[4j + i] · x[4L + i]` for the four 32-bit lanes `j` (signed bytes).
pub(crate) trait Dot {
    /// # Safety
    /// The CPU must have what the implementation needs (NEON; dotprod for [`Sdot`]), and the
    /// caller must be compiled with that feature.
    unsafe fn dot<const L: i32>(acc: int32x4_t, c: int8x16_t, x: int8x16_t) -> int32x4_t;
}

/// Baseline NEON: the lane broadcast, two widening multiplies to i16 (`smull`, `smull2`; a
/// product is at most 127·128), pairwise adds to 4-byte groups (`addp`, then `sadalp` into
/// the i32 lanes): 5 instructions where dotprod has one.
pub(crate) struct Neon;

impl Dot for Neon {
    #[inline(always)]
    unsafe fn dot<const L: i32>(acc: int32x4_t, c: int8x16_t, x: int8x16_t) -> int32x4_t {
        let b = vreinterpretq_s8_s32(vdupq_laneq_s32::<L>(vreinterpretq_s32_s8(x)));
        let lo = vmull_s8(vget_low_s8(c), vget_low_s8(b));
        let hi = vmull_high_s8(c, b);
        // Two adjacent products sum to at most 2·127·128 < 2^15: no i16 overflow.
        vpadalq_s16(acc, vpaddq_s16(lo, hi))
    }
}

/// ARMv8.2 dotprod: `sdot vd.4s, vn.16b, vm.4b[L]`.
pub(crate) struct Sdot;

impl Dot for Sdot {
    #[inline(always)]
    unsafe fn dot<const L: i32>(mut acc: int32x4_t, c: int8x16_t, x: int8x16_t) -> int32x4_t {
        // SAFETY: register-only instruction; the caller runs with dotprod (see the trait).
        core::arch::asm!(
            "sdot {acc:v}.4s, {c:v}.16b, {x:v}.4b[{l}]",
            acc = inout(vreg) acc,
            c = in(vreg) c,
            x = in(vreg) x,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
        acc
    }
}

/// ARMv8.6 i8mm: `acc += A·Bᵀ` with `A` (`a`) and `B` (`b`) 2×8 signed byte matrices, one
/// row per 64-bit half; `acc` is the 2×2 result row-major (`[a0·b0, a0·b1, a1·b0, a1·b1]`).
///
/// # Safety
/// The CPU must have i8mm and the caller must be compiled with it.
#[inline(always)]
pub(crate) unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: register-only instruction; the caller runs with i8mm.
    core::arch::asm!(
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// Four f16 values (the low half of `h`) widened to f32 (`fcvtl`, ARMv8 base).
#[inline(always)]
pub(crate) fn f16_lo(h: uint16x8_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: register-only instruction of the ARMv8 base (FP/ASIMD).
    unsafe {
        core::arch::asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            r = out(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// The high four f16 values of `h` widened to f32 (`fcvtl2`).
#[inline(always)]
pub(crate) fn f16_hi(h: uint16x8_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: as [`f16_lo`].
    unsafe {
        core::arch::asm!(
            "fcvtl2 {r:v}.4s, {h:v}.8h",
            r = out(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// Eight f16 values from `p` as two f32 vectors.
///
/// # Safety
/// `p` must be readable for 16 bytes.
#[inline(always)]
pub(crate) unsafe fn load_f16x8(p: *const u8) -> (float32x4_t, float32x4_t) {
    // SAFETY: the caller keeps p..p + 16 inside its buffer.
    let h = vld1q_u16(p.cast());
    (f16_lo(h), f16_hi(h))
}

/// The vector twin of `kernels::attn::exp` (same operations, same rounding: `frintn` is
/// round-half-even as `round_ties_even`, and the fused multiply-adds sit where the scalar
/// twin's `mul_add`-free expressions are evaluated in the same order).
#[inline(always)]
pub(crate) unsafe fn exp(x: float32x4_t) -> float32x4_t {
    use crate::attn::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO};
    let keep = vcgeq_f32(x, vdupq_n_f32(EXP_LO));
    let x = vminq_f32(x, vdupq_n_f32(EXP_HI));
    let n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(std::f32::consts::LOG2_E)));
    let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    let mut p = vdupq_n_f32(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let e = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0));
    // 2^n from the exponent bits (n ≥ −126 after the max; lanes below EXP_LO are masked).
    let ni = vcvtq_s32_f32(vmaxq_f32(n, vdupq_n_f32(-126.0)));
    let pow = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(ni, vdupq_n_s32(127))));
    vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(e, pow)), keep))
}
