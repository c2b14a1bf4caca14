//! W4A16 in the strict sense: packed Q4 codes (`q4_packed`, every GGUF form included) against
//! f32 activations, accumulated in f32: the exact path (`--activations f32`). The int8 path's
//! kernels are in `q4_packed`; the SIMD versions in `x86/{avx2,avx512}/q4p_f32.rs` and `aarch64/q4p_f32.rs`.

use super::q4_packed::{PackedQ4, GROUP};
use super::Cpu;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::Isa;

/// Per token and block, the sum of the activations: a block's zero point meets it once.
pub fn block_sums(x: &[f32], block: usize) -> Vec<f32> {
    x.chunks_exact(block).map(|b| b.iter().sum()).collect()
}

/// W4A16 in the strict sense: the packed codes against f32 activations, accumulated in f32
/// (`POCKET_ACT=f32`). `x` holds `n` tokens of `cols` values and `sums` their
/// [`block_sums`]; `out` is `n × count`, token-major. Per block, `s · Σ c·x + (z − 8s) · Σ x`:
/// the decoded weight `s·c + z − 8s` with its scale and zero point taken out of the sum.
pub fn dot_rows_f32(
    cpu: Cpu,
    p: &PackedQ4,
    first: usize,
    count: usize,
    x: &[f32],
    sums: &[f32],
    out: &mut [f32],
) {
    let n = out.len() / count.max(1);
    assert!(first % GROUP == 0 && count % GROUP == 0 && first + count <= p.rows);
    assert!(out.len() == n * count && x.len() == n * p.cols && sums.len() == n * p.blocks());
    assert!(p.data.len() == p.rows / GROUP * p.blocks() * p.record());
    match cpu.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => {
            // SAFETY: the CPU has AVX-512 F/BW/VL, F16C and FMA (the `Cpu` token proves it); the
            // layout, the row range, the activations and the output were checked above.
            unsafe { super::x86::avx512::q4p_f32::dot_rows(p, first, count, x, sums, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: as above, for AVX2, FMA and F16C.
            unsafe { super::x86::avx2::q4p_f32::dot_rows(p, first, count, x, sums, out) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => {
            // SAFETY: the CPU has NEON (the `Cpu` token proves it); the layout, the row range,
            // the activations and the output were checked above.
            unsafe { super::aarch64::q4p_f32::dot_rows(p, first, count, x, sums, out) }
        }
        _ => dot_rows_f32_scalar(p, first, count, x, sums, out),
    }
}

/// The scalar twin of [`dot_rows_f32`].
pub fn dot_rows_f32_scalar(
    p: &PackedQ4,
    first: usize,
    count: usize,
    x: &[f32],
    sums: &[f32],
    out: &mut [f32],
) {
    let (cols, nb) = (p.cols, p.blocks());
    for (t, o) in out.chunks_exact_mut(count).enumerate() {
        for (i, o) in o.iter_mut().enumerate() {
            let r = first + i;
            let k = r % GROUP;
            let mut total = 0.0f32;
            for b in 0..nb {
                let (rec, z, s) = p.at(r, b);
                let mut dot = 0.0f32;
                for w in 0..p.block / 8 {
                    for j in 0..4 {
                        let x = &x[t * cols + b * p.block + w * 8 + j * 2..];
                        dot += p.form.int_value(p.code(rec, k, w, j, 0)) as f32 * x[0]
                            + p.form.int_value(p.code(rec, k, w, j, 1)) as f32 * x[1];
                    }
                }
                let off = p.form.offset as f32;
                total += s * dot + (z - off * s) * sums[t * nb + b];
            }
            *o = total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::q4::Q4Matrix;
    use crate::testutil::{each_q4_case, Rng};

    /// The f32-activation kernel equals the codec's decoded rows times x, on every path.
    #[test]
    fn w4a16_matches_decoded_rows() {
        let mut rng = Rng(23);
        each_q4_case(
            &mut rng,
            &[(16, 64), (48, 896), (32, 384)],
            |rng, rows, cols, block, sym, bytes| {
                let w = Q4Matrix::from_bytes(bytes, rows, cols, block, sym);
                let p = PackedQ4::pack(&w).unwrap();
                for n in [1, 3, 4, 7] {
                    let x = rng.vec(n * cols, 2.0);
                    let sums = block_sums(&x, block);
                    let first = if rows > GROUP { GROUP } else { 0 };
                    let count = rows - first;
                    let mut want = vec![0.0f64; n * count];
                    let mut row = vec![0.0; cols];
                    for i in 0..count {
                        p.row(first + i, &mut row);
                        for t in 0..n {
                            want[t * count + i] = row
                                .iter()
                                .zip(&x[t * cols..])
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum();
                        }
                    }
                    for isa in crate::available() {
                        let mut got = vec![0.0; n * count];
                        dot_rows_f32(isa, &p, first, count, &x, &sums, &mut got);
                        for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (*g as f64 - e).abs() <= 2e-5 * (1.0 + e.abs()),
                                "{isa:?} {rows}x{cols} b{block} sym={sym} n={n} #{j}: {g} vs {e}"
                            );
                        }
                    }
                }
            },
        );
    }
}
