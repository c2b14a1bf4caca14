//! AVX2 + FMA + F16C kernels (int8 dot products through `vpmaddubsw`).

pub(crate) mod act;
pub(crate) mod attn;
pub(crate) mod gate;
pub(crate) mod lora;
pub(crate) mod q4;
pub(crate) mod q4p;
pub(crate) mod q4p_f32;
pub(crate) mod q8;
pub(crate) mod q8p;
pub(crate) mod q8p_f32;
