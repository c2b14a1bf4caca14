//! Every matrix-kernel family against its scalar twin on random shapes, through one runner
//! ([`against_twin`]): row counts and block counts odd and even, every block size the family
//! takes, one to sixteen tokens, on every level this CPU runs. The per-family tests beside each
//! kernel keep the model shapes (576, 896, 2560 columns) and the layouts' corner cases; these
//! find what fixed shapes miss. The cases come from fixed seeds, so a failure replays.

use crate::act::QuantActs;
use crate::testutil::{against_twin, close, random_cases, Case, Rng, Shapes};
use crate::{q4, q4_packed, q8, q8_packed, w4a16, w8a16, Cpu};
use pocket_formats::quant::{q4 as q4_codec, q8 as q8_codec, search::Method};

/// Integer products summed exactly; only the f32 scale arithmetic may round differently.
const INT_TOL: f32 = 1e-5;
/// f32 activations summed in another order.
const F32_TOL: f32 = 5e-5;

fn q4_bytes(c: &Case, rng: &mut Rng) -> Vec<u8> {
    let v = rng.vec(c.rows * c.cols, 0.1);
    let opt = q4_codec::Options {
        block: c.block,
        sym: c.sym,
        method: Method::Rtn,
        grid: false,
        importance: None,
        compensation: None,
    };
    q4_codec::quantize(&v, c.rows, c.cols, opt).bytes
}

/// `c.tokens` random activations quantized in the case's block, laid out in `chunk`.
fn acts(c: &Case, rng: &mut Rng, chunk: usize) -> Vec<QuantActs> {
    (0..c.tokens)
        .map(|_| {
            let mut a = QuantActs::default();
            a.quantize(Cpu::detect(), &rng.vec(c.cols, 2.0), c.block, chunk);
            a
        })
        .collect()
}

/// The twin token by token: `out[t·count + i] = row(first + i) · x_t`.
fn per_token(
    acts: &[QuantActs],
    count: usize,
    mut one: impl FnMut(&QuantActs, &mut [f32]),
) -> Vec<f32> {
    let mut out = vec![0.0; acts.len() * count];
    for (a, o) in acts.iter().zip(out.chunks_exact_mut(count)) {
        one(a, o);
    }
    out
}

/// Random Q8 codes and scales for the case (codes first, then the f16 scales).
fn q8_bytes(c: &Case, rng: &mut Rng) -> Vec<u8> {
    q8_codec::quantize(&rng.vec(c.rows * c.cols, 0.2), c.rows, c.cols, c.block).0
}

/// The case's Q8 matrix in the packed layout, through the row-by-row packer (which takes
/// GGUF's blocks of 32 as well as `.pocket`'s 64).
fn q8_packed_of(c: &Case, bytes: &[u8]) -> Option<q8_packed::PackedQ8> {
    let (codes, scales) = bytes.split_at(c.rows * c.cols);
    let nb = c.cols / c.block;
    q8_packed::PackedQ8::from_codes(c.rows, c.cols, c.block, |r, co, sc| {
        co.copy_from_slice(&codes[r * c.cols..][..c.cols]);
        sc.copy_from_slice(&scales[r * nb * 2..][..nb * 2]);
    })
}

fn q8_matrix<'a>(c: &Case, bytes: &'a [u8]) -> q8::Q8Matrix<'a> {
    let (codes, scales) = bytes.split_at(c.rows * c.cols);
    q8::Q8Matrix {
        codes,
        scales,
        rows: c.rows,
        cols: c.cols,
        block: c.block,
    }
}

/// A row-major family's two entry points against its twin, rows `first..first + count`:
/// `tokens` (all of `acts` at once) and `one` (the mat-vec, first token).
fn rows_against_twin(
    acts: &[QuantActs],
    count: usize,
    twin: impl FnMut(&QuantActs, &mut [f32]),
    tokens: impl FnOnce(&mut [f32]),
    one: impl FnOnce(&mut [f32]),
) -> Result<(), String> {
    let want = per_token(acts, count, twin);
    let mut got = vec![f32::NAN; want.len()];
    tokens(&mut got);
    close(&got, &want, INT_TOL).map_err(|e| format!("tokens {e}"))?;
    let mut first = vec![f32::NAN; count];
    one(&mut first);
    close(&first, &want[..count], INT_TOL).map_err(|e| format!("one token {e}"))
}

#[test]
fn q4_rows_on_random_shapes() {
    let shapes = Shapes {
        row_step: 1,
        max_rows: 37,
        blocks: &[32, 64, 128],
        max_blocks: 9,
        max_tokens: 16,
    };
    against_twin("q4", &random_cases(41, 32, &shapes), |cpu, c| {
        let mut rng = Rng(c.seed);
        let bytes = q4_bytes(c, &mut rng);
        let w = q4::Q4Matrix::from_bytes(&bytes, c.rows, c.cols, c.block, c.sym);
        let acts = acts(c, &mut rng, q4::act_chunk(cpu));
        let (first, count) = (c.rows / 3, c.rows - c.rows / 3);
        rows_against_twin(
            &acts,
            count,
            |a, o| q4::dot_rows_scalar(&w, first, a, o),
            |got| q4::dot_rows_tokens(cpu, &w, first, count, &acts, got),
            |got| q4::dot_rows(cpu, &w, first, &acts[0], got),
        )
    });
}

#[test]
fn q8_rows_on_random_shapes() {
    let shapes = Shapes {
        row_step: 1,
        max_rows: 37,
        blocks: &[32, 64],
        max_blocks: 11,
        max_tokens: 16,
    };
    against_twin("q8", &random_cases(43, 32, &shapes), |cpu, c| {
        let mut rng = Rng(c.seed);
        let bytes = q8_bytes(c, &mut rng);
        let w = q8_matrix(c, &bytes);
        let acts = acts(c, &mut rng, 0);
        let (first, count) = (c.rows / 3, c.rows - c.rows / 3);
        rows_against_twin(
            &acts,
            count,
            |a, o| q8::dot_rows_scalar(&w, first, a, o),
            |got| q8::dot_rows_tokens(cpu, &w, first, count, &acts, got),
            |got| q8::dot_rows(cpu, &w, first, &acts[0], got),
        )
    });
}

/// The packed Q4 layout (16 rows interleaved), with int8 and with f32 activations (W4A16).
#[test]
fn q4_packed_on_random_shapes() {
    let shapes = Shapes {
        row_step: q4_packed::GROUP,
        max_rows: 4 * q4_packed::GROUP,
        blocks: &[32, 64, 128],
        max_blocks: 9,
        max_tokens: 40,
    };
    against_twin("q4 packed", &random_cases(47, 32, &shapes), |cpu, c| {
        let mut rng = Rng(c.seed);
        let bytes = q4_bytes(c, &mut rng);
        let w = q4::Q4Matrix::from_bytes(&bytes, c.rows, c.cols, c.block, c.sym);
        let p = q4_packed::PackedQ4::pack(&w).ok_or("the shape does not pack")?;
        let first = q4_packed::GROUP * (c.rows > q4_packed::GROUP) as usize;
        let count = c.rows - first;
        let acts = acts(c, &mut rng, q4_packed::ACT_CHUNK);
        let mut want = vec![0.0; acts.len() * count];
        q4_packed::dot_rows_tokens_scalar(&p, first, count, &acts, &mut want);
        let mut got = vec![f32::NAN; want.len()];
        q4_packed::dot_rows_tokens(cpu, &p, first, count, &acts, &mut got);
        close(&got, &want, INT_TOL).map_err(|e| format!("int8 {e}"))?;
        let x = rng.vec(c.tokens * c.cols, 2.0);
        let sums = w4a16::block_sums(&x, c.block);
        let mut want = vec![0.0; c.tokens * count];
        w4a16::dot_rows_f32_scalar(&p, first, count, &x, &sums, &mut want);
        let mut got = vec![f32::NAN; want.len()];
        w4a16::dot_rows_f32(cpu, &p, first, count, &x, &sums, &mut got);
        close(&got, &want, F32_TOL).map_err(|e| format!("f32 {e}"))
    });
}

#[test]
fn q8_packed_on_random_shapes() {
    let shapes = Shapes {
        row_step: q8_packed::GROUP,
        max_rows: 4 * q8_packed::GROUP,
        blocks: &[32, 64],
        max_blocks: 11,
        max_tokens: 40,
    };
    against_twin("q8 packed", &random_cases(53, 24, &shapes), |cpu, c| {
        let mut rng = Rng(c.seed);
        let bytes = q8_bytes(c, &mut rng);
        let p = q8_packed_of(c, &bytes).ok_or("the shape does not pack")?;
        let first = q8_packed::GROUP * (c.rows > q8_packed::GROUP) as usize;
        let count = c.rows - first;
        let acts = acts(c, &mut rng, 0);
        let mut want = vec![0.0; acts.len() * count];
        q8_packed::dot_rows_tokens_scalar(&p, first, count, &acts, &mut want);
        let mut got = vec![f32::NAN; want.len()];
        q8_packed::dot_rows_tokens(cpu, &p, first, count, &acts, &mut got);
        close(&got, &want, INT_TOL)?;
        // f32 activations: the same bits as the decoded row and `scalar::dot`, not only close.
        let x = rng.vec(c.cols, 2.0);
        let mut want = vec![0.0; count];
        w8a16::dot_rows_f32_scalar(&p, first, count, &x, &mut want);
        let mut got = vec![f32::NAN; count];
        w8a16::dot_rows_f32(cpu, &p, first, count, &x, &mut got);
        match got
            .iter()
            .zip(&want)
            .position(|(g, w)| g.to_bits() != w.to_bits())
        {
            Some(i) => Err(format!("f32 row {i}: {} against {}", got[i], want[i])),
            None => Ok(()),
        }
    });
}

/// Verification and batches rest on this: a pass over many tokens gives each token the bits a
/// one-token call gives it, on every level (AVX-512's four-token tiles, AMX's 16-row tiles,
/// aarch64's `smmla` pairs), packed Q4 and Q8, 1 to 40 tokens.
#[test]
fn many_tokens_give_each_token_the_bits_of_one() {
    let shapes = Shapes {
        row_step: q4_packed::GROUP,
        max_rows: 3 * q4_packed::GROUP,
        blocks: &[32, 64, 128],
        max_blocks: 7,
        max_tokens: 40,
    };
    let bits = |got: &[f32], one: &[f32], t: usize| -> Result<(), String> {
        match got
            .iter()
            .zip(one)
            .position(|(a, b)| a.to_bits() != b.to_bits())
        {
            None => Ok(()),
            Some(i) => Err(format!(
                "token {t}, row {i}: {} vs {} alone",
                got[i], one[i]
            )),
        }
    };
    against_twin("many tokens", &random_cases(59, 24, &shapes), |cpu, c| {
        let mut rng = Rng(c.seed);
        let first = q4_packed::GROUP * (c.rows > q4_packed::GROUP) as usize;
        let count = c.rows - first;
        let bytes = q4_bytes(c, &mut rng);
        let w = q4::Q4Matrix::from_bytes(&bytes, c.rows, c.cols, c.block, c.sym);
        let p = q4_packed::PackedQ4::pack(&w).ok_or("the shape does not pack")?;
        let acts4 = acts(c, &mut rng, q4_packed::ACT_CHUNK);
        let mut all = vec![f32::NAN; acts4.len() * count];
        q4_packed::dot_rows_tokens(cpu, &p, first, count, &acts4, &mut all);
        let mut one = vec![f32::NAN; count];
        for t in 0..acts4.len() {
            q4_packed::dot_rows_tokens(cpu, &p, first, count, &acts4[t..t + 1], &mut one);
            bits(&all[t * count..][..count], &one, t).map_err(|e| format!("q4 {e}"))?;
        }
        if c.block > 64 {
            return Ok(());
        }
        let bytes = q8_bytes(c, &mut rng);
        let p = q8_packed_of(c, &bytes).ok_or("the shape does not pack")?;
        let acts8 = acts(c, &mut rng, 0);
        q8_packed::dot_rows_tokens(cpu, &p, first, count, &acts8, &mut all);
        for t in 0..acts8.len() {
            q8_packed::dot_rows_tokens(cpu, &p, first, count, &acts8[t..t + 1], &mut one);
            bits(&all[t * count..][..count], &one, t).map_err(|e| format!("q8 {e}"))?;
        }
        Ok(())
    });
}
