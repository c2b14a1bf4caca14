//! AVX-512 F/BW/VL + VNNI kernels (int8 dot products through `vpdpbusd`).

pub(crate) mod act;
pub(crate) mod attn;
pub(crate) mod dense;
pub(crate) mod gate;
pub(crate) mod interleave;
pub(crate) mod lora;
pub(crate) mod q4;
pub(crate) mod q4p;
pub(crate) mod q4p_f32;
pub(crate) mod q8;
pub(crate) mod q8p;
