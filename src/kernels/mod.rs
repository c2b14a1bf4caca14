//! Hand-written compute kernels, chosen at run time for the CPU they run on. Every kernel has
//! a portable scalar twin that defines what it must compute, and a test that compares the two
//! on random inputs of odd sizes.
//!
//! Only the f32 tile kernel used by batched matmul lives here so far; the quantized mat-vec
//! kernels arrive with the fast-engine issue (#9).

pub mod f32_tile;
