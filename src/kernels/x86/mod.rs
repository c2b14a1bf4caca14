//! x86-64 versions of the kernels. Each `unsafe fn` requires the CPU features named in its
//! `#[target_feature]` and is only called after run-time detection (see `kernels::detect`).

pub mod act_avx2;
pub mod act_avx512;
pub mod attn_avx2;
pub mod attn_avx512;
pub mod dense_avx512;
pub mod interleave_avx512;
pub mod q4_avx2;
pub mod q4_avx512;
pub mod q4p_avx2;
pub mod q4p_avx512;
pub mod q4p_f32_avx2;
pub mod q4p_f32_avx512;
pub mod q8_avx2;
pub mod q8_avx512;
pub mod q8p_avx2;
pub mod q8p_avx512;
pub mod silu_avx2;
pub mod silu_avx512;
