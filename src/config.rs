//! How a model runs, chosen once and carried by the model: the kernels' instruction set, the
//! precision activations meet quantized weights in, and the KV cache's element type. These are
//! values, not process globals, so two models in one process (a test comparing paths, a draft
//! and its target) can run different paths. Nothing here reads the environment: the CLI
//! turns `POCKET_ISA`, `POCKET_ACT` and `POCKET_KV` into an [`EngineConfig`].

pub use crate::kernels::{Cpu, Isa};
pub use crate::kv_cache::KvPrecision;

/// How activations meet quantized weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// Quantized to int8 per block; integer dot products: llama.cpp's q8 activations, and
    /// the fastest prefill. Its rounding (about 0.4 % of a block's largest value) is enough to
    /// flip a near-tie: on SmolLM2's Q4_1 GGUF, KL 0.0046 from the f32 path.
    Int8,
    /// Two int8 digits per block, the activation and its residual, through the same integer
    /// kernels (the default): about 15 bits, KL 1e-6 from the f32 path on the same file, at
    /// int8's decode speed (decode reads weights; the extra products hide behind the reads)
    /// and about 0.6 of its prefill speed.
    Int8x2,
    /// Kept in f32; weights decoded to f32 (the reference path, W4A16 in the strict sense).
    F32,
}

impl Activations {
    /// Int8 digits per activation on the integer kernels (0: the f32 path).
    pub fn digits(self) -> usize {
        match self {
            Activations::Int8 => 1,
            Activations::Int8x2 => 2,
            Activations::F32 => 0,
        }
    }

    /// The name the CLI and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Activations::Int8 => "int8",
            Activations::Int8x2 => "int8x2",
            Activations::F32 => "f32",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// The kernels' instruction set (a [`Cpu`] proves the CPU has it).
    pub cpu: Cpu,
    pub activations: Activations,
    /// The element type of new KV caches ([`crate::model::Model::new_state`]).
    pub kv: KvPrecision,
}

impl Default for EngineConfig {
    /// [`EngineConfig::fast`].
    fn default() -> EngineConfig {
        EngineConfig::fast()
    }
}

impl EngineConfig {
    /// The best kernels this CPU has, two-digit int8 activations and an f16 cache: the
    /// shipping path.
    pub fn fast() -> EngineConfig {
        EngineConfig {
            cpu: Cpu::detect(),
            activations: Activations::Int8x2,
            kv: KvPrecision::F16,
        }
    }

    /// f32 activations and an f32 cache: the reference the fast path is measured against
    /// (equal to transformers up to float summation order).
    pub fn exact() -> EngineConfig {
        EngineConfig {
            activations: Activations::F32,
            kv: KvPrecision::F32,
            ..EngineConfig::fast()
        }
    }

    /// The same, with the instruction set capped at `isa` (never above what the CPU has).
    pub fn capped(self, isa: Isa) -> EngineConfig {
        EngineConfig {
            cpu: self.cpu.capped(isa),
            ..self
        }
    }
}
