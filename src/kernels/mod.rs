//! Hand-written compute kernels, chosen at run time for the CPU they run on. Every kernel has
//! a portable scalar twin that defines what it must compute, and a test that compares the two
//! on random inputs of odd sizes.
//!
//! Layout (after memchr): `q4`/`q8` hold the scalar definitions and the dispatch, `x86/` the
//! AVX2 and AVX-512 versions. The instruction set is detected once; `POCKET_ISA=scalar|avx2|
//! avx512` (or [`force`]) caps it, so tests and benchmarks can run every path on one machine.

pub mod act;
pub mod attn;
pub mod dense;
pub mod dot;
pub mod f32_tile;
pub mod interleave;
pub mod pool;
pub mod q4;
pub mod q4_packed;
pub mod q8;
pub mod q8_packed;
pub mod silu;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::atomic::{AtomicU8, Ordering};

/// The kernel families, from slowest to fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust: the definition of every kernel.
    Scalar = 1,
    /// x86-64 AVX2 + FMA + F16C (int8 dot products through `vpmaddubsw`).
    Avx2 = 2,
    /// x86-64 AVX-512 F/BW/VL with VNNI (`vpdpbusd`).
    Avx512 = 3,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512-vnni",
        }
    }

    pub fn parse(s: &str) -> Option<Isa> {
        match s {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" | "avx512-vnni" => Some(Isa::Avx512),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> Isa {
        match v {
            3 => Isa::Avx512,
            2 => Isa::Avx2,
            _ => Isa::Scalar,
        }
    }
}

/// The best instruction set this CPU supports.
pub fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("f16c")
            && is_x86_feature_detected!("fma")
        {
            return Isa::Avx512;
        }
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// 0: not decided yet.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The instruction set kernels use: the detected one, capped by `POCKET_ISA` or [`force`].
pub fn active() -> Isa {
    match ACTIVE.load(Ordering::Relaxed) {
        0 => {
            let best = detect();
            let isa = std::env::var("POCKET_ISA")
                .ok()
                .and_then(|v| Isa::parse(&v))
                .map_or(best, |cap| cap.min(best));
            ACTIVE.store(isa as u8, Ordering::Relaxed);
            isa
        }
        v => Isa::from_u8(v),
    }
}

/// Caps the instruction set (never above what the CPU has); returns what is now active.
pub fn force(cap: Isa) -> Isa {
    let isa = cap.min(detect());
    ACTIVE.store(isa as u8, Ordering::Relaxed);
    isa
}

/// How activations meet quantized weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// Quantized to int8 per block; integer dot products (the fast default).
    Int8,
    /// Kept in f32; weights decoded to f32 (the reference path, W4A16 in the strict sense).
    F32,
}

/// 0: not decided yet, 1: int8, 2: f32.
static ACTS: AtomicU8 = AtomicU8::new(0);

/// The activation precision for quantized weights: int8 unless `POCKET_ACT=f32` or
/// [`set_activations`] says otherwise.
pub fn activations() -> Activations {
    match ACTS.load(Ordering::Relaxed) {
        1 => Activations::Int8,
        2 => Activations::F32,
        _ => {
            let a = match std::env::var("POCKET_ACT").as_deref() {
                Ok("f32") => Activations::F32,
                _ => Activations::Int8,
            };
            set_activations(a);
            a
        }
    }
}

pub fn set_activations(a: Activations) {
    ACTS.store(
        match a {
            Activations::Int8 => 1,
            Activations::F32 => 2,
        },
        Ordering::Relaxed,
    );
}

/// Every instruction set this CPU can run, for tests that compare them.
pub fn available() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|&i| i <= detect())
        .collect()
}

#[cfg(test)]
pub(crate) mod testutil {
    /// Deterministic pseudo-random numbers for kernel tests.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next_u32(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }

        /// Uniform in [-1, 1).
        pub fn f32(&mut self) -> f32 {
            self.next_u32() as f32 / (1u64 << 30) as f32 - 1.0
        }

        pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
            (0..n).map(|_| self.f32() * scale).collect()
        }
    }

    /// The Q4 kernel tests' cases: for each `[rows, cols]` shape, block 32/64/128 (those that
    /// divide `cols`) and asymmetric then symmetric, a random matrix quantized by the codec
    /// (round to nearest) is handed to `f(rng, rows, cols, block, sym, bytes)`.
    pub fn each_q4_case(
        rng: &mut Rng,
        shapes: &[(usize, usize)],
        mut f: impl FnMut(&mut Rng, usize, usize, usize, bool, &[u8]),
    ) {
        use pocket_formats::quant::{q4 as codec, search::Method};
        for &(rows, cols) in shapes {
            for block in [32, 64, 128] {
                if cols % block != 0 {
                    continue;
                }
                for sym in [false, true] {
                    let v = rng.vec(rows * cols, 0.1);
                    let opt = codec::Options {
                        block,
                        sym,
                        method: Method::Rtn,
                        grid: false,
                        importance: None,
                    };
                    let bytes = codec::quantize(&v, rows, cols, opt).bytes;
                    f(rng, rows, cols, block, sym, &bytes);
                }
            }
        }
    }
}
