//! Activations quantized to int8, per block of the weight matrix they meet: `x ≈ scale · q`,
//! `q` in −127..=127 with `scale = max|x| / 127` (llama.cpp's Q8 activations, MNN's default
//! "low memory" mode). Integer dot products against 4- and 8-bit weight codes then do the
//! multiply-adds, and each block's float scale is applied once.

/// One activation vector in int8, with what the kernels need per block.
#[derive(Default)]
pub struct QuantActs {
    pub cols: usize,
    pub block: usize,
    /// `q` in natural order.
    pub q: Vec<i8>,
    /// `q` reordered for the Q4 SIMD kernels: in chunks of `chunk` elements (the last one may
    /// be 64), the even elements, then the odd ones — the order of the high and low nibbles of
    /// a run of packed 4-bit codes.
    pub perm: Vec<i8>,
    pub chunk: usize,
    /// Per block; padded with 16 zeros so vector loads may run past the last block.
    pub scale: Vec<f32>,
    /// Per block: `scale · Σq` (padded likewise).
    pub scaled_sum: Vec<f32>,
}

/// Extra zeros after the per-block arrays.
pub const PAD: usize = 16;

impl QuantActs {
    /// Quantizes `x` in blocks of `block` with the kernels of `cpu` (every path gives
    /// identical bits); `chunk` (0 for none) also fills [`QuantActs::perm`].
    pub fn quantize(&mut self, cpu: super::Cpu, x: &[f32], block: usize, chunk: usize) {
        assert!(block > 0 && x.len() % block == 0);
        let nb = x.len() / block;
        self.cols = x.len();
        self.block = block;
        self.chunk = chunk;
        self.q.resize(x.len(), 0);
        self.scale.clear();
        self.scale.resize(nb + PAD, 0.0);
        self.scaled_sum.clear();
        self.scaled_sum.resize(nb + PAD, 0.0);
        #[cfg(target_arch = "x86_64")]
        if cpu.has(super::Isa::Avx512) && block % 16 == 0 {
            // SAFETY: AVX-512 F/BW are present (the `Cpu` token proves it); `q` has x.len() entries
            // and the per-block arrays nb + PAD.
            unsafe {
                super::x86::avx512::act::quantize(
                    x,
                    block,
                    &mut self.q,
                    &mut self.scale,
                    &mut self.scaled_sum,
                )
            };
        } else if cpu.has(super::Isa::Avx2) && block % 32 == 0 {
            // SAFETY: AVX2 is present (the `Cpu` token proves it); `block % 32 == 0`, `q` has x.len()
            // entries and the per-block arrays nb + PAD.
            unsafe {
                super::x86::avx2::act::quantize(
                    x,
                    block,
                    &mut self.q,
                    &mut self.scale,
                    &mut self.scaled_sum,
                )
            };
        } else {
            quantize_scalar(x, block, &mut self.q, &mut self.scale, &mut self.scaled_sum);
        }
        #[cfg(target_arch = "aarch64")]
        if cpu.has(super::Isa::Neon) && block % 16 == 0 {
            // SAFETY: NEON is present (the `Cpu` token proves it); `block % 16 == 0`, `q` has
            // x.len() entries and the per-block arrays nb + PAD.
            unsafe {
                super::aarch64::act::quantize(
                    x,
                    block,
                    &mut self.q,
                    &mut self.scale,
                    &mut self.scaled_sum,
                )
            };
        } else {
            quantize_scalar(x, block, &mut self.q, &mut self.scale, &mut self.scaled_sum);
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        quantize_scalar(x, block, &mut self.q, &mut self.scale, &mut self.scaled_sum);
        // A reused `QuantActs` (the batched matmul keeps them) must not keep an old layout.
        self.perm.clear();
        if chunk > 0 {
            self.perm.resize(x.len(), 0);
            #[cfg(target_arch = "x86_64")]
            if chunk == 8 && cpu.has(super::Isa::Avx512) {
                // SAFETY: AVX-512 F/BW are present (the `Cpu` token proves it); `q` and `perm` have
                // the same length, a multiple of 8.
                unsafe { super::x86::avx512::act::perm8(&self.q, &mut self.perm) };
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if chunk == 8 && cpu.has(super::Isa::Avx2) {
                // SAFETY: AVX2 is present (the `Cpu` token proves it); `q` and `perm` have the same
                // length, a multiple of 8.
                unsafe { super::x86::avx2::act::perm8(&self.q, &mut self.perm) };
                return;
            }
            #[cfg(target_arch = "aarch64")]
            if chunk == 8 && cpu.has(super::Isa::Neon) {
                // SAFETY: NEON is present (the `Cpu` token proves it); `q` and `perm` have the
                // same length, a multiple of 8.
                unsafe { super::aarch64::act::perm8(&self.q, &mut self.perm) };
                return;
            }
            let mut start = 0;
            while start < x.len() {
                let len = chunk.min(x.len() - start);
                let (src, dst) = (
                    &self.q[start..start + len],
                    &mut self.perm[start..start + len],
                );
                let half = len / 2;
                for j in 0..half {
                    dst[j] = src[2 * j];
                    dst[half + j] = src[2 * j + 1];
                }
                start += len;
            }
        }
    }

    /// Quantizes `x` into `out.len()` digits: `out[0]` as [`QuantActs::quantize`], and each
    /// next one the residual the digits before it leave (`x − Σ dequantized`), so a product
    /// summed over the digits keeps about 7 more bits of the activations per digit.
    pub fn quantize_digits(
        cpu: super::Cpu,
        x: &[f32],
        block: usize,
        chunk: usize,
        out: &mut [QuantActs],
    ) {
        let Some((first, rest)) = out.split_first_mut() else {
            return;
        };
        first.quantize(cpu, x, block, chunk);
        if rest.is_empty() {
            return;
        }
        let mut r = x.to_vec();
        let mut prev: &QuantActs = first;
        for d in rest {
            for ((rs, qs), &s) in r
                .chunks_exact_mut(block)
                .zip(prev.q.chunks_exact(block))
                .zip(&prev.scale)
            {
                for (v, &q) in rs.iter_mut().zip(qs) {
                    *v -= q as f32 * s;
                }
            }
            d.quantize(cpu, &r, block, chunk);
            prev = d;
        }
    }

    /// The dequantized values (for tests and error measurements).
    pub fn dequantize(&self) -> Vec<f32> {
        self.q
            .chunks_exact(self.block)
            .zip(&self.scale)
            .flat_map(|(qs, &s)| qs.iter().map(move |&q| q as f32 * s))
            .collect()
    }
}

/// The scalar twin of the per-block quantization (the definition).
pub fn quantize_scalar(
    x: &[f32],
    block: usize,
    q: &mut [i8],
    scale: &mut [f32],
    scaled_sum: &mut [f32],
) {
    for (b, (xs, qs)) in x
        .chunks_exact(block)
        .zip(q.chunks_exact_mut(block))
        .enumerate()
    {
        let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = amax / 127.0;
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in qs.iter_mut().zip(xs) {
            // `round` is half away from zero, as llama.cpp's roundf; |v·inv| ≤ 127.
            let r = (v * inv).round().clamp(-127.0, 127.0) as i8;
            *q = r;
            sum += r as i32;
        }
        scale[b] = s;
        scaled_sum[b] = s * sum as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn quantization_error_is_within_half_a_step() {
        let mut rng = Rng(3);
        let x = rng.vec(64 * 5, 2.0);
        let mut a = QuantActs::default();
        a.quantize(crate::Cpu::detect(), &x, 64, 128);
        let back = a.dequantize();
        for (b, (xs, ys)) in x.chunks(64).zip(back.chunks(64)).enumerate() {
            let step = a.scale[b];
            for (u, v) in xs.iter().zip(ys) {
                assert!((u - v).abs() <= 0.5 * step * 1.0001, "{u} {v} {step}");
            }
            let sum: i32 = a.q[b * 64..(b + 1) * 64].iter().map(|&q| q as i32).sum();
            assert_eq!(a.scaled_sum[b], step * sum as f32);
        }
        // Chunks of 8, every path: evens then odds (40 values: a tail after the vectors).
        for (isa, n, block) in crate::available()
            .into_iter()
            .flat_map(|i| [(i, x.len(), 64), (i, 40, 8)])
        {
            let mut b = QuantActs::default();
            b.quantize(isa, &x[..n], block, 8);
            for (c, (p, q)) in b.perm.chunks(8).zip(b.q.chunks(8)).enumerate() {
                assert_eq!(
                    p,
                    &[q[0], q[2], q[4], q[6], q[1], q[3], q[5], q[7]],
                    "{isa:?} chunk {c}"
                );
            }
        }
        // Chunks of 128 with a 64 tail: evens then odds.
        assert_eq!(a.perm[0], a.q[0]);
        assert_eq!(a.perm[1], a.q[2]);
        assert_eq!(a.perm[64], a.q[1]);
        assert_eq!(a.perm[256], a.q[256]);
        assert_eq!(a.perm[256 + 32], a.q[257]);
    }

    /// The SIMD quantizer is bit-identical to the scalar twin, ties and extremes included.
    #[test]
    fn simd_matches_the_scalar_twin() {
        let mut rng = Rng(8);
        for block in [32, 64, 128] {
            let mut x = rng.vec(block * 7, 3.0);
            // Exact halves after scaling: amax 127 makes the scale 1.
            x[0] = 127.0;
            x[1] = 2.5;
            x[2] = -2.5;
            x[3] = 0.5;
            x[4] = -0.5;
            x[block..2 * block].fill(0.0);
            let nb = x.len() / block;
            let (mut q, mut s, mut ss) = (vec![0i8; x.len()], vec![0.0; nb], vec![0.0; nb]);
            quantize_scalar(&x, block, &mut q, &mut s, &mut ss);
            assert_eq!(&q[1..5], &[3, -3, 1, -1]);
            for isa in crate::available() {
                let mut a = QuantActs::default();
                a.quantize(isa, &x, block, 0);
                assert_eq!(a.q, q, "{isa:?}");
                assert_eq!(&a.scale[..nb], &s[..], "{isa:?}");
                assert_eq!(&a.scaled_sum[..nb], &ss[..], "{isa:?}");
            }
        }
    }

    /// The second digit holds the first one's residual: its step is at most 1/254 of the
    /// first's, and the two together are within half of that smaller step of `x`.
    #[test]
    fn two_digits_keep_the_residual() {
        let mut rng = Rng(11);
        for block in [16, 32, 64] {
            let mut x = rng.vec(block * 5, 4.0);
            x[3] = 90.0; // an outlier block, as LLM activations have
            for isa in crate::available() {
                let mut d = [QuantActs::default(), QuantActs::default()];
                QuantActs::quantize_digits(isa, &x, block, 8, &mut d);
                let (hi, lo) = (d[0].dequantize(), d[1].dequantize());
                for b in 0..x.len() / block {
                    assert!(
                        d[1].scale[b] <= d[0].scale[b] / 254.0 * 1.0001,
                        "{isa:?} {b}"
                    );
                    for i in b * block..(b + 1) * block {
                        let err = (x[i] - hi[i] - lo[i]).abs();
                        assert!(
                            err <= 0.5 * d[1].scale[b] * 1.001 + 1e-7,
                            "{isa:?} {i}: {err}"
                        );
                    }
                }
                // One digit alone is `quantize`, bit for bit.
                let mut one = QuantActs::default();
                one.quantize(isa, &x, block, 8);
                assert_eq!((one.q, one.perm), (d[0].q.clone(), d[0].perm.clone()));
            }
        }
    }

    #[test]
    fn zero_blocks_stay_zero() {
        let mut a = QuantActs::default();
        a.quantize(crate::Cpu::detect(), &[0.0; 64], 64, 64);
        assert!(a.q.iter().all(|&q| q == 0));
        assert_eq!(a.scale[0], 0.0);
    }
}
