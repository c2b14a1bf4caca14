//! Hot kernels in isolation, single-threaded: int8-activation Q4 and Q8 rows for the shapes of
//! the MNN-Pocket model (hidden 896, FFN 2560), on every instruction set this CPU runs: one token
//! (decode) and 16 tokens per call (prefill).
//! Throughput is in multiply-adds (elements) per second; divide by the weight bytes per
//! multiply-add for GB/s (Q4 block 64 asym: 0.5625 B, Q8 block 64: 1.03 B, bf16: 2 B).
//! `dense_bf16` is the full-precision baseline's kernel (bf16 weights, f32 activations).
//!
//! `cargo bench --bench kernels`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pocket::kernels::attn::{self, Running};
use pocket::kernels::dense::{self, DenseKind, DenseMatrix};
use pocket::kernels::{act::QuantActs, q4, q4_packed, q8, Cpu, Isa};
use pocket::kv_cache::{KvCache, KvPrecision};
use pocket_formats::quant::q4 as codec;
use pocket_formats::quant::q8 as codec8;
use pocket_formats::quant::search::Method;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// The bench's weights as the asymmetric block-64 Q4 matrix (round to nearest) and the
/// block-64 Q8 one (codes, then scales).
fn q4_q8(w: &[f32], rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let opt = codec::Options {
        block: 64,
        sym: false,
        method: Method::Rtn,
        grid: false,
        importance: None,
        compensation: None,
    };
    let q4 = codec::quantize(w, rows, cols, opt).bytes;
    (q4, codec8::quantize(w, rows, cols, 64).0)
}

fn isas() -> Vec<Cpu> {
    Cpu::each()
}

/// Tokens per call in the batched (prefill) benchmark.
const BATCH: usize = 16;

fn bench(c: &mut Criterion) {
    for &(rows, cols) in &[(2560usize, 896usize), (896, 2560), (65536, 896)] {
        let w = values(rows * cols, 1);
        let x = values(cols, 2);
        let (bytes, b8) = q4_q8(&w, rows, cols);
        let (codes, params) = codec::planes(&bytes, rows, cols);
        let m = q4::Q4Matrix {
            codes,
            params,
            rows,
            cols,
            block: 64,
            sym: false,
        };
        // The tied embedding / head's recipe: symmetric, block 32.
        let opt_s = codec::Options {
            block: 32,
            sym: true,
            method: Method::Rtn,
            grid: false,
            importance: None,
            compensation: None,
        };
        let bytes_s = codec::quantize(&w, rows, cols, opt_s).bytes;
        let (codes_s, params_s) = codec::planes(&bytes_s, rows, cols);
        let ms = q4::Q4Matrix {
            codes: codes_s,
            params: params_s,
            rows,
            cols,
            block: 32,
            sym: true,
        };
        let (c8, s8) = b8.split_at(rows * cols);
        let m8 = q8::Q8Matrix {
            codes: c8,
            scales: s8,
            rows,
            cols,
            block: 64,
        };
        let bf16: Vec<u8> = w
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let mb = DenseMatrix {
            bytes: &bf16,
            rows,
            cols,
            kind: DenseKind::BF16,
        };
        let mut g = c.benchmark_group(format!("matvec_{rows}x{cols}"));
        g.throughput(Throughput::Elements((rows * cols) as u64));
        let mut y = vec![0.0f32; rows];
        for isa in isas() {
            g.bench_function(format!("dense_bf16_{}", isa.isa().name()), |b| {
                b.iter(|| dense::rows_tokens(isa, &mb, 0, rows, &x, 1, &mut y))
            });
            let mut a = QuantActs::default();
            a.quantize(isa, &x, 64, q4::act_chunk(isa));
            g.bench_function(format!("q4a_b64_{}", isa.isa().name()), |b| {
                b.iter(|| q4::dot_rows(isa, &m, 0, &a, &mut y))
            });
            if isa.has(Isa::Avx2) {
                let packed = q4_packed::PackedQ4::pack(&m).expect("16-row shape");
                a.quantize(isa, &x, 64, q4_packed::ACT_CHUNK);
                g.bench_function(format!("q4a_b64_packed16_{}", isa.isa().name()), |b| {
                    b.iter(|| {
                        q4_packed::dot_rows_tokens(
                            isa,
                            &packed,
                            0,
                            rows,
                            std::slice::from_ref(&a),
                            &mut y,
                        )
                    })
                });
            }
            a.quantize(isa, &x, 32, q4::act_chunk(isa));
            g.bench_function(format!("q4s_b32_{}", isa.isa().name()), |b| {
                b.iter(|| q4::dot_rows(isa, &ms, 0, &a, &mut y))
            });
            a.quantize(isa, &x, 64, 0);
            g.bench_function(format!("q8_b64_{}", isa.isa().name()), |b| {
                b.iter(|| q8::dot_rows(isa, &m8, 0, &a, &mut y))
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("matmul{BATCH}_{rows}x{cols}"));
        g.throughput(Throughput::Elements((BATCH * rows * cols) as u64));
        let xs = values(BATCH * cols, 3);
        let mut out = vec![0.0f32; BATCH * rows];
        for isa in isas().into_iter().filter(|&i| i.isa() != Isa::Scalar) {
            g.bench_function(format!("dense_bf16_{}", isa.isa().name()), |b| {
                b.iter(|| dense::rows_tokens(isa, &mb, 0, rows, &xs, BATCH, &mut out))
            });
            let acts: Vec<QuantActs> = xs
                .chunks_exact(cols)
                .map(|x| {
                    let mut a = QuantActs::default();
                    a.quantize(isa, x, 64, q4::act_chunk(isa));
                    a
                })
                .collect();
            g.bench_function(format!("q4a_b64_{}", isa.isa().name()), |b| {
                b.iter(|| q4::dot_rows_tokens(isa, &m, 0, rows, &acts, &mut out))
            });
            if isa.has(Isa::Avx2) {
                let packed = q4_packed::PackedQ4::pack(&m).expect("16-row shape");
                let acts: Vec<QuantActs> = xs
                    .chunks_exact(cols)
                    .map(|x| {
                        let mut a = QuantActs::default();
                        a.quantize(isa, x, 64, q4_packed::ACT_CHUNK);
                        a
                    })
                    .collect();
                g.bench_function(format!("q4a_b64_packed16_{}", isa.isa().name()), |b| {
                    b.iter(|| q4_packed::dot_rows_tokens(isa, &packed, 0, rows, &acts, &mut out))
                });
            }
        }
        g.finish();
    }
}

/// Decode attention of one KV head's query group (MNN-Pocket: 7 query heads, head_dim 64) over
/// 4,096 positions, in an f16 and an int8 (`--kv q8`) cache: once with one head (held in L2)
/// and once walking the 56 heads of 28 layers (streamed from DRAM as in a real step).
/// Throughput is in cache bytes read.
fn bench_attention(c: &mut Criterion) {
    let (g, d, n) = (7usize, 64usize, 4096usize);
    let q = values(g * d, 4);
    let head = |seed: u64, kv: KvPrecision| {
        let mut cache = KvCache::new(1, 1, d, n, kv);
        let (k, v) = (values(n * d, seed), values(n * d, seed + 1));
        for t in 0..n {
            cache.push(0, &k[t * d..(t + 1) * d], &v[t * d..(t + 1) * d]);
        }
        cache
    };
    for kv in [KvPrecision::F16, KvPrecision::Q8] {
        let heads: Vec<KvCache> = (0..56).map(|h| head(10 + 2 * h, kv)).collect();
        let mut group = c.benchmark_group(format!("attn_decode_{}_g{g}_d{d}_n{n}", kv.name()));
        // The scalar twin takes half a second for the DRAM set: it is the definition, not a path.
        for isa in isas().into_iter().filter(|&i| i.isa() != Isa::Scalar) {
            for (label, count) in [("l2", 1usize), ("dram", heads.len())] {
                let bytes: usize = heads[..count].iter().map(|h| h.bytes()).sum();
                group.throughput(Throughput::Bytes(bytes as u64));
                group.bench_function(format!("{label}_{}", isa.isa().name()), |b| {
                    b.iter(|| {
                        for h in &heads[..count] {
                            let mut run = Running::new(g, d);
                            attn::span(isa, &q, d, h.layer(0).head(0), 0, n, &mut run);
                            std::hint::black_box(&run);
                        }
                    })
                });
            }
        }
        group.finish();
    }
}

/// One decode step's attention at depth over the MNN-Pocket shape's 28 layers (2 KV heads of
/// 64, 14 query heads), as `Model::step` runs it (spans on the worker pool): the part of a
/// step that grows with the context. Throughput is in cache bytes read.
fn bench_attention_depth(c: &mut Criterion) {
    let spec = pocket_formats::hf::ModelSpec::from_json(
        std::path::Path::new("config.json"),
        &serde_json::json!({
            "model_type": "qwen3", "hidden_size": 896, "intermediate_size": 2560,
            "num_hidden_layers": 28, "num_attention_heads": 14, "num_key_value_heads": 2,
            "head_dim": 64, "vocab_size": 65536, "max_position_embeddings": 40960,
            "rms_norm_eps": 1e-6
        }),
    )
    .expect("the MNN-Pocket shape");
    let cpu = Cpu::detect();
    let q = values(14 * 64, 5);
    for n in [4096usize, 16384] {
        for kv in [KvPrecision::F16, KvPrecision::Q8] {
            let mut cache = KvCache::new(28, 2, 64, n, kv);
            let row = values(n * 128, 7);
            for t in 0..n {
                for l in 0..28 {
                    let r = &row[t * 128..(t + 1) * 128];
                    cache.push(l, r, r);
                }
            }
            let mut group = c.benchmark_group(format!("attn_step_{}_n{n}", kv.name()));
            group.throughput(Throughput::Bytes(cache.bytes() as u64));
            group.bench_function(cpu.isa().name(), |b| {
                let mut out = vec![0.0f32; 14 * 64];
                b.iter(|| {
                    for l in 0..28 {
                        pocket::attention::attend(
                            cpu,
                            &spec,
                            &q,
                            &cache.layer(l),
                            n,
                            None,
                            &mut out,
                            pocket::attention::Split::Pool,
                        );
                    }
                    std::hint::black_box(&out);
                })
            });
            group.finish();
        }
    }
}

/// The kernel's pass-cost curve: one weight pass over 1–16 tokens (the rows of a verification
/// pass or a batched step), packed Q4 block 64 and Q8 block 64, MNN-Pocket's FFN shapes.
/// Throughput is in multiply-adds, so a flat line means each extra token costs a full one.
fn bench_rows(c: &mut Criterion) {
    for &(rows, cols) in &[(2560usize, 896usize), (896, 2560), (65536, 896)] {
        let (bytes, b8) = q4_q8(&values(rows * cols, 1), rows, cols);
        let (codes, params) = codec::planes(&bytes, rows, cols);
        let m = q4::Q4Matrix {
            codes,
            params,
            rows,
            cols,
            block: 64,
            sym: false,
        };
        let (c8, s8) = b8.split_at(rows * cols);
        let m8 = q8::Q8Matrix {
            codes: c8,
            scales: s8,
            rows,
            cols,
            block: 64,
        };
        let packed = q4_packed::PackedQ4::pack(&m).expect("16-row shape");
        let packed8 = pocket::kernels::q8_packed::PackedQ8::pack(&m8).expect("16-row shape");
        for isa in isas().into_iter().filter(|&i| i.has(Isa::Avx2)) {
            let mut g = c.benchmark_group(format!("rows_{rows}x{cols}_{}", isa.isa().name()));
            for n in [1usize, 2, 4, 8, 16] {
                g.throughput(Throughput::Elements((n * rows * cols) as u64));
                let xs = values(n * cols, 3);
                let acts: Vec<QuantActs> = xs
                    .chunks_exact(cols)
                    .map(|x| {
                        let mut a = QuantActs::default();
                        a.quantize(isa, x, 64, q4_packed::ACT_CHUNK);
                        a
                    })
                    .collect();
                let acts8: Vec<QuantActs> = xs
                    .chunks_exact(cols)
                    .map(|x| {
                        let mut a = QuantActs::default();
                        a.quantize(isa, x, 64, 0);
                        a
                    })
                    .collect();
                let mut out = vec![0.0f32; n * rows];
                g.bench_function(format!("q4_b64_{n}"), |b| {
                    b.iter(|| q4_packed::dot_rows_tokens(isa, &packed, 0, rows, &acts, &mut out))
                });
                g.bench_function(format!("q8_b64_{n}"), |b| {
                    b.iter(|| {
                        pocket::kernels::q8_packed::dot_rows_tokens(
                            isa, &packed8, 0, rows, &acts8, &mut out,
                        )
                    })
                });
            }
            g.finish();
        }
    }
}

/// A GGUF's block types as the engine carries them in (packed Q4 records with their own
/// [`q4_packed::Form`], or packed Q8), one token, in bytes of the packed matrix per second:
/// the mat-vec a downloaded file's decode runs, shape by shape (Qwen2.5-0.5B's FFN; the
/// K-quants' 256-weight super-blocks want the 4,864-wide side). A form whose kernel spends
/// more on unpacking than the memory system needs to deliver the bytes shows as a low figure
/// here long before it does in a whole decode.
fn bench_gguf_forms(c: &mut Criterion) {
    use pocket::kernels::q4_packed::{Form, PackedQ4};
    use pocket::kernels::q8_packed::{self, PackedQ8};
    use pocket_formats::gguf::{codes, GgmlType};
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
        GgmlType::Q8_0,
    ];
    for isa in isas().into_iter().filter(|&i| i.isa() != Isa::Scalar) {
        let mut g = c.benchmark_group(format!("gguf_forms_{}", isa.isa().name()));
        for ty in types {
            let (rows, cols) = if ty.block().0 == 256 {
                (896, 4864)
            } else {
                (4864, 896)
            };
            let row_bytes = ty.bytes_for(cols as u64).expect("shape") as usize;
            let data = codes::sample_blocks(ty, rows * row_bytes / ty.block().1, &mut 7);
            let row = |r: usize| &data[r * row_bytes..][..row_bytes];
            let x = values(cols, 2);
            let name = format!("{ty:?}_{rows}x{cols}");
            if ty == GgmlType::Q8_0 {
                let p = PackedQ8::from_codes(rows, cols, 32, |r, codes, scales| {
                    for (b, blk) in row(r).chunks_exact(34).enumerate() {
                        scales[b * 2..][..2].copy_from_slice(&blk[..2]);
                        codes[b * 32..][..32].copy_from_slice(&blk[2..]);
                    }
                })
                .expect("Q8_0 packs");
                let mut a = QuantActs::default();
                a.quantize(isa, &x, 32, 0);
                let (acts, mut out) = ([a], vec![0.0f32; rows]);
                g.throughput(Throughput::Bytes(p.data.len() as u64));
                g.bench_function(name, |b| {
                    b.iter(|| q8_packed::dot_rows_tokens(isa, &p, 0, rows, &acts, &mut out))
                });
                continue;
            }
            let cf = codes::form(ty).expect("a packed form");
            let p = PackedQ4::from_codes(
                rows,
                cols,
                cf.block,
                !cf.has_zero,
                Form::of(cf),
                |r, c, s, z| codes::unpack(ty, row(r), c, s, z),
            )
            .expect("the form packs");
            let mut a = QuantActs::default();
            a.quantize(isa, &x, cf.block, q4_packed::ACT_CHUNK);
            let (acts, mut out) = ([a], vec![0.0f32; rows]);
            g.throughput(Throughput::Bytes(p.data.len() as u64));
            g.bench_function(&name, |b| {
                b.iter(|| q4_packed::dot_rows_tokens(isa, &p, 0, rows, &acts, &mut out))
            });
            // Several activation rows over the same weights (a verification pass, a batch, or
            // one token's two int8x2 digits), as weights read per second: the multi-row
            // kernels' work is the products, so this falls as rows are added.
            for n in [2usize, 4, 8, 16] {
                let acts: Vec<QuantActs> = values(n * cols, 5)
                    .chunks_exact(cols)
                    .map(|x| {
                        let mut a = QuantActs::default();
                        a.quantize(isa, x, cf.block, q4_packed::ACT_CHUNK);
                        a
                    })
                    .collect();
                let mut out = vec![0.0f32; n * rows];
                g.throughput(Throughput::Elements((n * rows * cols) as u64));
                g.bench_function(format!("{name}_rows{n}"), |b| {
                    b.iter(|| q4_packed::dot_rows_tokens(isa, &p, 0, rows, &acts, &mut out))
                });
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(2));
    targets = bench, bench_rows, bench_gguf_forms, bench_attention, bench_attention_depth
}
criterion_main!(benches);
