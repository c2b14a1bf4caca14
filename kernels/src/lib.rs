//! Hand-written compute kernels, chosen at run time for the CPU they run on. Every kernel has
//! a portable scalar twin that defines what it must compute, and a test that compares the two
//! on random inputs of odd sizes.
//!
//! Layout (after memchr): `q4`, `q8`, `attn`, … hold the scalar definitions and the dispatch;
//! `x86/avx2/`, `x86/avx512/` and `aarch64/` the SIMD versions, `pub(crate)`, one file per
//! kernel family. One dispatch style: every dispatcher takes a [`Cpu`], a token that
//! only run-time detection creates ([`Cpu::detect`]), so holding one proves the instructions
//! exist and no kernel checks again. A caller can lower it ([`Cpu::capped`]: tests and
//! benchmarks run every path on one machine), never raise it. Which level a model uses is a
//! value in its [`EngineConfig`](crate::config::EngineConfig), not a process global.

#[cfg(target_arch = "aarch64")]
mod aarch64;
pub mod act;
pub mod attn;
pub mod attn_q4;
pub mod attn_q8;
pub mod dense;
pub mod exp_weights;
pub mod f32_tile;
pub mod gate;
pub mod interleave;
pub mod lora;
pub mod norm;
pub mod q4;
pub mod q4_form;
pub mod q4_packed;
pub mod q8;
pub mod q8_packed;
pub mod scalar;
#[cfg(test)]
mod twins;
pub mod w4a16;
pub mod w8a16;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

/// The kernel families, from slowest to fastest within each architecture: a name for flags
/// and reports. Kernels take a [`Cpu`], which proves the level is there. The x86-64 and
/// aarch64 levels are two ladders above the shared scalar rung; a level of one architecture
/// never compares above or below one of the other (see [`Cpu::has`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust: the definition of every kernel.
    Scalar = 1,
    /// x86-64 AVX2 + FMA + F16C (int8 dot products through `vpmaddubsw`).
    Avx2 = 2,
    /// x86-64 AVX-512 F/BW/VL with VNNI (`vpdpbusd`).
    Avx512 = 3,
    /// aarch64 Advanced SIMD, every ARMv8-A (int8 dot products through `smull` + `sadalp`).
    Neon = 4,
    /// aarch64 with the dot-product extension (ARMv8.2 `sdot`: Snapdragon 845+, Apple A11+).
    Dotprod = 5,
    /// aarch64 with the int8 matrix multiply (ARMv8.6 `smmla`: Snapdragon 8 Gen 1+, Apple
    /// M2/A15+) as well as dotprod: prefill tiles take 2×8·8×2 products.
    I8mm = 6,
    /// x86-64 AVX-512 VNNI with AMX-INT8 tiles (Xeon Sapphire Rapids and later): passes over
    /// several tokens (verification, batches, prefill) multiply 16 tokens by 16 rows × 64
    /// codes per `tdpbsud`; everything else runs the AVX-512 kernels.
    Amx = 7,
}

/// Which ladder a level is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Any,
    X86_64,
    Aarch64,
}

impl Isa {
    /// Every level, lowest first within each architecture.
    pub const ALL: [Isa; 7] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::Avx512,
        Isa::Amx,
        Isa::Neon,
        Isa::Dotprod,
        Isa::I8mm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512-vnni",
            Isa::Amx => "avx512-amx",
            Isa::Neon => "aarch64-neon",
            Isa::Dotprod => "aarch64-dotprod",
            Isa::I8mm => "aarch64-i8mm",
        }
    }

    pub fn arch(self) -> Arch {
        match self {
            Isa::Scalar => Arch::Any,
            Isa::Avx2 | Isa::Avx512 | Isa::Amx => Arch::X86_64,
            Isa::Neon | Isa::Dotprod | Isa::I8mm => Arch::Aarch64,
        }
    }

    /// The short names (`POCKET_ISA`) and the reported names.
    pub fn parse(s: &str) -> Option<Isa> {
        match s {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" | "avx512-vnni" => Some(Isa::Avx512),
            "amx" | "avx512-amx" => Some(Isa::Amx),
            "neon" | "aarch64-neon" => Some(Isa::Neon),
            "dotprod" | "aarch64-dotprod" => Some(Isa::Dotprod),
            "i8mm" | "aarch64-i8mm" => Some(Isa::I8mm),
            _ => None,
        }
    }

    /// The levels this build's architecture has (scalar first), for messages.
    pub fn native() -> Vec<Isa> {
        let arch = if cfg!(target_arch = "x86_64") {
            Arch::X86_64
        } else if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::Any
        };
        Isa::ALL
            .into_iter()
            .filter(|i| i.arch() == Arch::Any || i.arch() == arch)
            .collect()
    }
}

/// Proof that this CPU runs the kernels of [`Cpu::isa`]. The field is private: the only ways
/// to get one are [`Cpu::detect`] (what the CPU has), [`Cpu::scalar`] (always true) and
/// [`Cpu::capped`] (a lower level of one you hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cpu {
    isa: Isa,
}

impl Cpu {
    /// The best instruction set this CPU supports (detected once).
    pub fn detect() -> Cpu {
        static BEST: OnceLock<Isa> = OnceLock::new();
        Cpu {
            isa: *BEST.get_or_init(detect_isa),
        }
    }

    /// The portable path, on any CPU.
    pub fn scalar() -> Cpu {
        Cpu { isa: Isa::Scalar }
    }

    /// This level or `cap`, whichever is lower; a cap from another architecture's ladder
    /// lowers it to scalar (the CLI refuses such a cap before it gets here).
    pub fn capped(self, cap: Isa) -> Cpu {
        if self.has(cap) {
            Cpu { isa: cap }
        } else if cap.arch() == self.isa.arch() {
            self
        } else {
            Cpu::scalar()
        }
    }

    pub fn isa(self) -> Isa {
        self.isa
    }

    /// Whether the kernels of `isa` may run: scalar always, else a level at or below this
    /// one on the same architecture.
    pub fn has(self, isa: Isa) -> bool {
        isa == Isa::Scalar || (isa.arch() == self.isa.arch() && self.isa >= isa)
    }

    /// Whether any SIMD level is there (the packed layouts are worth building).
    pub fn simd(self) -> bool {
        self.isa != Isa::Scalar
    }

    /// Every level this CPU runs, lowest first, for tests that compare them.
    pub fn each() -> Vec<Cpu> {
        let best = Cpu::detect();
        Isa::ALL
            .into_iter()
            .filter(|&i| best.has(i))
            .map(|isa| Cpu { isa })
            .collect()
    }
}

fn detect_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("f16c")
            && is_x86_feature_detected!("fma")
        {
            return if x86::amx::permitted() {
                Isa::Amx
            } else {
                Isa::Avx512
            };
        }
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return Isa::Avx2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        if has!("neon") {
            if has!("dotprod") && has!("i8mm") {
                return Isa::I8mm;
            }
            if has!("dotprod") {
                return Isa::Dotprod;
            }
            return Isa::Neon;
        }
    }
    Isa::Scalar
}

/// Every level this CPU runs, for the kernel tests.
#[cfg(test)]
pub(crate) fn available() -> Vec<Cpu> {
    Cpu::each()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ladder is ordered, starts at scalar and ends at what detection found; CI runs the
    /// suite under `qemu-aarch64 -cpu max|cortex-a76|cortex-a72` and names the level each
    /// must detect in `POCKET_EXPECT_ISA`, so a detection that silently fell back would fail.
    #[test]
    fn detection_finds_the_expected_level() {
        let each = Cpu::each();
        assert_eq!(each[0], Cpu::scalar());
        assert_eq!(*each.last().unwrap(), Cpu::detect());
        assert!(each
            .windows(2)
            .all(|w| w[0].isa() < w[1].isa() && w[1].has(w[0].isa())));
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()), Some(isa));
            let capped = Cpu::detect().capped(isa);
            assert!(Cpu::detect().has(capped.isa()));
            assert!(capped.isa() == isa || !Cpu::detect().has(isa));
        }
        println!("detected {}", Cpu::detect().isa().name());
        if let Ok(want) = std::env::var("POCKET_EXPECT_ISA") {
            assert_eq!(Cpu::detect().isa().name(), want);
        }
    }
}

/// Test helpers, public so that the engine's tests of code built on the kernels (the LoRA
/// groups on the worker pool) draw the same inputs.
#[doc(hidden)]
pub mod testutil {
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

    /// One random case of a kernel test: a matrix shape, its block, how many tokens, and the
    /// seed of its values. Printed when a kernel disagrees with its twin, to replay it.
    #[derive(Clone, Copy, Debug)]
    pub struct Case {
        pub rows: usize,
        pub cols: usize,
        pub block: usize,
        pub sym: bool,
        pub tokens: usize,
        pub seed: u64,
    }

    /// What shapes a kernel family takes: rows a multiple of `row_step` up to `max_rows`,
    /// one of `blocks`, columns a whole number of blocks up to `max_blocks`.
    pub struct Shapes<'a> {
        pub row_step: usize,
        pub max_rows: usize,
        pub blocks: &'a [usize],
        pub max_blocks: usize,
        pub max_tokens: usize,
    }

    /// `n` random cases of `shapes` from `seed`: odd row and block counts come up as often
    /// as even ones, and the same seed gives the same cases on every machine.
    pub fn random_cases(seed: u64, n: usize, shapes: &Shapes) -> Vec<Case> {
        let mut rng = Rng(seed);
        let mut pick = |k: usize| rng.next_u32() as usize % k;
        (0..n)
            .map(|i| {
                let block = shapes.blocks[pick(shapes.blocks.len())];
                Case {
                    rows: shapes.row_step * (1 + pick(shapes.max_rows / shapes.row_step)),
                    cols: block * (1 + pick(shapes.max_blocks)),
                    block,
                    sym: pick(2) == 1,
                    tokens: 1 + pick(shapes.max_tokens),
                    seed: seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
                }
            })
            .collect()
    }

    /// The one runner every kernel family's twin test goes through (memchr's shape): `check`
    /// runs each case on each level this CPU has (scalar included, so the twin checks its
    /// own dispatch) and returns what differed; every failure is collected and reported with
    /// its level and case, so one run shows the whole pattern of a bug.
    pub fn against_twin(
        family: &str,
        cases: &[Case],
        mut check: impl FnMut(crate::Cpu, &Case) -> Result<(), String>,
    ) {
        let mut failures = Vec::new();
        for case in cases {
            for cpu in crate::Cpu::each() {
                if let Err(e) = check(cpu, case) {
                    failures.push(format!("{:?} {case:?}: {e}", cpu.isa()));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{family}: {} of {} runs differ from the scalar twin:\n{}",
            failures.len(),
            cases.len() * crate::Cpu::each().len(),
            failures.join("\n")
        );
    }

    /// The first index where `got` and `want` differ by more than `tol · (1 + |want|)`.
    pub fn close(got: &[f32], want: &[f32], tol: f32) -> Result<(), String> {
        assert_eq!(got.len(), want.len());
        match got
            .iter()
            .zip(want)
            .position(|(g, e)| !((g - e).abs() <= tol * (1.0 + e.abs())))
        {
            None => Ok(()),
            Some(i) => Err(format!("#{i}: {} vs {}", got[i], want[i])),
        }
    }

    /// f16 bits of each value (the adapters' stored form).
    pub fn half_bits(v: &[f32]) -> Vec<u16> {
        v.iter()
            .map(|&x| half::f16::from_f32(x).to_bits())
            .collect()
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
                        compensation: None,
                    };
                    let bytes = codec::quantize(&v, rows, cols, opt).bytes;
                    f(rng, rows, cols, block, sym, &bytes);
                }
            }
        }
    }
}
