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
    /// Quantized to int8 per block; integer dot products (the fast default).
    Int8,
    /// Kept in f32; weights decoded to f32 (the reference path, W4A16 in the strict sense).
    F32,
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
    /// The best kernels this CPU has, int8 activations and an f16 cache: the shipping path.
    pub fn fast() -> EngineConfig {
        EngineConfig {
            cpu: Cpu::detect(),
            activations: Activations::Int8,
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
