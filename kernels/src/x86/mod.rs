//! x86-64 versions of the kernels, one folder per instruction set. Each `unsafe fn` requires
//! the CPU features named in its `#[target_feature]`; the dispatchers in `kernels/` call them
//! only with a [`Cpu`](super::Cpu) token, which nothing but run-time detection creates.

pub(crate) mod amx;
pub(crate) mod avx2;
pub(crate) mod avx512;
