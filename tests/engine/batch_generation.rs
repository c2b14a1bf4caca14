//! Batched generation (evaluation runs) gives the answers one-at-a-time generation gives: same
//! tokens, same finish reasons, same cut text, for prompts of different lengths and stop rules
//! decoded together.

use pocket::batch::{generate_text_queue, BatchItem};
use pocket::generate::{generate_text, Control, StopAt};
use pocket::sampler::{Sampler, SamplerConfig};

use crate::common;
use std::path::{Path, PathBuf};

/// A tiny fixture as it is, or exported to `quant` under `tmp`.
fn tiny_model(name: &str, quant: Option<&str>, tmp: &Path) -> PathBuf {
    let dir = common::tiny(name);
    let Some(q) = quant else { return dir };
    let out = tmp.join("m.pocket");
    let o = common::pocket(&[
        "export",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quant",
        q,
        "--calib",
        "none",
    ]);
    assert!(o.status.success());
    out
}

#[test]
fn batched_answers_equal_single_stream_answers() {
    for (name, file) in [
        ("qwen3-tiny", None),
        ("llama-tiny", None),
        ("qwen2-tiny", Some("q4")),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        // One quantized build, so the batched int8 kernels are covered too.
        let path = tiny_model(name, file, tmp.path());
        let m = crate::common::open(&path).unwrap();
        let texts = [
            "Hello there",
            "The quick brown fox jumps over the lazy dog and",
            "1 2 3",
            "Once upon a time, in a land far away, there lived",
        ];
        let maxes = [20usize, 17, 3, 25];
        let prompts: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| m.tokenizer.encode(t, true).unwrap())
            .collect();
        // Stop strings taken from the middle of unstopped answers, so they are met.
        let mid = |i: usize| {
            let mut state = m.model.new_state(128);
            let mut sampler = Sampler::new(SamplerConfig::default());
            let none: Vec<String> = Vec::new();
            let stop = StopAt {
                ids: &m.stop_ids,
                strings: &none,
                max_tokens: maxes[i],
            };
            let g = generate_text(
                &m.model,
                &m.tokenizer,
                &mut state,
                &prompts[i],
                &mut sampler,
                &stop,
                |_| Control::Continue,
            )
            .unwrap();
            let chars: Vec<char> = g.text.chars().collect();
            chars[chars.len() / 2..chars.len() / 2 + 2]
                .iter()
                .collect::<String>()
        };
        let stops: Vec<Vec<String>> = vec![
            vec![],
            vec![mid(1)],
            vec![],
            vec!["\u{1}never".into(), mid(3)],
        ];
        let stop_at = |i: usize| StopAt {
            ids: &m.stop_ids,
            strings: &stops[i],
            max_tokens: maxes[i],
        };

        let mut single = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let mut state = m.model.new_state(128);
            let mut sampler = Sampler::new(SamplerConfig::default());
            let g = generate_text(
                &m.model,
                &m.tokenizer,
                &mut state,
                p,
                &mut sampler,
                &stop_at(i),
                |_| Control::Continue,
            )
            .unwrap();
            single.push(g);
        }
        let items: Vec<BatchItem> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| BatchItem {
                prompt: p.clone(),
                stop: stop_at(i),
            })
            .collect();
        // Three slots for four items: the fourth takes the first slot that frees up.
        let mut states: Vec<_> = (0..3).map(|_| m.model.new_state(128)).collect();
        let mut batch: Vec<Option<_>> = items.iter().map(|_| None).collect();
        generate_text_queue(
            &m.model,
            &m.tokenizer,
            &mut states,
            || Sampler::new(SamplerConfig::default()),
            &items,
            false,
            |i, g| {
                batch[i] = Some(g);
                Ok(())
            },
        )
        .unwrap();
        let batch: Vec<_> = batch.into_iter().map(Option::unwrap).collect();
        for (i, (a, b)) in single.iter().zip(&batch).enumerate() {
            assert_eq!(
                a.generation.tokens, b.generation.tokens,
                "{name} prompt {i}"
            );
            assert_eq!(
                a.generation.finish_reason, b.generation.finish_reason,
                "{name} prompt {i}"
            );
            assert_eq!(a.text, b.text, "{name} prompt {i}");
        }
        // The stop rules were exercised: one answer stopped on a string, one on length.
        let reasons: Vec<String> = batch
            .iter()
            .map(|g| format!("{:?}", g.generation.finish_reason))
            .collect();
        assert!(
            reasons.iter().any(|r| r == "Length") && reasons.iter().any(|r| r == "Stop"),
            "{name}: {reasons:?}"
        );
    }
}

/// Prompts that begin alike (few-shot examples) continue from a cache holding their shared
/// beginning (to the token, or to whole prefill chunks on the W4A16 path), in place or copied
/// from another slot, and still answer exactly as a fresh one-at-a-time prefill does. Gemma
/// 3's sliding-window rings wrap inside these prompts, so its copies are refused and its long
/// prompts run whole: the fallback is checked too.
#[test]
fn shared_prompt_beginnings_give_fresh_prefill_answers() {
    use pocket::generate::PREFILL_CHUNK;
    for (name, quant, exact) in [
        ("qwen2-tiny", Some("q4"), false),
        ("qwen2-tiny", Some("q4"), true),
        ("llama-tiny", None, false),
        ("gemma3-tiny", None, false),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tiny_model(name, quant, tmp.path());
        let m = match exact {
            false => crate::common::open(&path).unwrap(),
            true => crate::common::open_exact(&path).unwrap(),
        };
        let name = format!("{name} exact {exact}");
        let family = |words: &str| {
            let mut t = m.tokenizer.encode(&words.repeat(60), true).unwrap();
            t.truncate(3 * PREFILL_CHUNK + 40);
            t
        };
        let x = family("Question: how many apples are left? Answer: three, since two were eaten. ");
        let y = family("Translate to French: the cat sleeps on the red mat near the door. ");
        let tail = |t: &str| m.tokenizer.encode(t, false).unwrap();
        let cut = |f: &[u32], n: usize, t: &str| [&f[..n], &tail(t)[..]].concat();
        // Three slots; the first three items start them, the next three replace them in slot
        // order when they all end together, and so on. Item 3 must copy its chunks from item
        // 2's slot (its own slot holds the other family), item 6 keeps its own slot's.
        let prompts = vec![
            cut(&x, x.len(), " Now: one plus one is"),
            tail("A short unrelated prompt"),
            cut(&y, y.len(), " Now"),
            // Shares two whole chunks and a part of the third with item 2.
            cut(&y, 2 * PREFILL_CHUNK + 17, " Then"),
            tail("Another short one"),
            // Exactly two chunks long: one is kept, the last token runs again.
            x[..2 * PREFILL_CHUNK].to_vec(),
            // Item 3's prompt again: all but the chunk of its last token is kept.
            cut(&y, 2 * PREFILL_CHUNK + 17, " Then"),
            cut(&x, PREFILL_CHUNK - 3, " Short"),
            cut(&x, x.len(), " Now: the sky is"),
        ];
        let ctx = 4 * PREFILL_CHUNK;
        let stop = StopAt {
            ids: &m.stop_ids,
            strings: &[],
            max_tokens: 6,
        };
        let single: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                let mut state = m.model.new_state(ctx);
                let mut sampler = Sampler::new(SamplerConfig::default());
                generate_text(
                    &m.model,
                    &m.tokenizer,
                    &mut state,
                    p,
                    &mut sampler,
                    &stop,
                    |_| Control::Continue,
                )
                .unwrap()
                .generation
                .tokens
            })
            .collect();
        let items: Vec<BatchItem> = prompts
            .iter()
            .map(|p| BatchItem {
                prompt: p.clone(),
                stop: StopAt {
                    ids: &m.stop_ids,
                    strings: &[],
                    max_tokens: 6,
                },
            })
            .collect();
        for share in [true, false] {
            let mut states: Vec<_> = (0..3).map(|_| m.model.new_state(ctx)).collect();
            let mut got: Vec<Option<Vec<u32>>> = items.iter().map(|_| None).collect();
            let mut ran = vec![0; items.len()];
            generate_text_queue(
                &m.model,
                &m.tokenizer,
                &mut states,
                || Sampler::new(SamplerConfig::default()),
                &items,
                share,
                |i, g| {
                    ran[i] = g.generation.prefill_tokens;
                    got[i] = Some(g.generation.tokens);
                    Ok(())
                },
            )
            .unwrap();
            for (i, (a, b)) in single.iter().zip(&got).enumerate() {
                assert_eq!(Some(a), b.as_ref(), "{name} share {share} prompt {i}");
            }
            let whole = |i: usize| ran[i] == prompts[i].len();
            let long = |i: usize| prompts[i].len() > PREFILL_CHUNK;
            if !share || name.starts_with("gemma3") {
                assert!(
                    (0..ran.len()).filter(|&i| long(i)).all(whole),
                    "{name} {ran:?}"
                );
                continue;
            }
            // Item 3 shares two chunks and 17 tokens with item 2: it runs the last few tokens
            // (or, resuming at whole chunks only, its third chunk).
            let tail = prompts[3].len() - 2 * PREFILL_CHUNK;
            match exact {
                false => assert!(ran[3] < tail - 15, "{name} {ran:?}"),
                true => assert_eq!(ran[3], tail, "{name} {ran:?}"),
            }
        }
    }
}

/// What token-granular prefix sharing rests on: a prompt token's computation does not depend on
/// how the run of tokens around it is cut into passes, as long as no pass is a single token
/// (one row takes the mat-vec kernels, which round differently). Every row's logits of one
/// pass equal, bit for bit, those of the same tokens run in pieces of 2 to 40 tokens, on
/// either side of the kernels' small-batch and token-split thresholds, for Q4, Q8, bf16 and
/// f16 builds, f32 Qwen 3, Llama and Gemma 3 checkpoints and Q4_1/Q8_0 GGUFs, on the default
/// path and on the exact one. The one exception, Q4 weights on the exact path's W4A16 kernels,
/// must be the one the model reports.
#[test]
fn prompt_rows_do_not_depend_on_how_a_run_is_cut() {
    use pocket::generate::{resume_point, PREFILL_CHUNK};
    use pocket::model::Logits;
    let gguf = |f: &str| common::root().join("fixtures/gguf").join(f);
    for (name, quant) in [
        ("qwen2-tiny", Some("q4")),
        ("qwen2-tiny", Some("q8")),
        ("qwen2-tiny", Some("bf16")),
        ("qwen2-tiny", Some("f16")),
        ("qwen3-tiny", None),
        ("llama-tiny", None),
        ("gemma3-tiny", None),
        ("llama-tiny-q4_1.gguf", None),
        ("llama-tiny-q8_0.gguf", None),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = match name.ends_with(".gguf") {
            true => gguf(name),
            false => tiny_model(name, quant, tmp.path()),
        };
        let name = format!("{name} {quant:?}");
        for exact in [false, true] {
            let m = match exact {
                false => crate::common::open(&path).unwrap(),
                true => crate::common::open_exact(&path).unwrap(),
            };
            let text =
                "The committee met on Tuesday to weigh three proposals for the bridge. ".repeat(8);
            let mut ids = m.tokenizer.encode(&text, true).unwrap();
            ids.truncate(100);
            assert_eq!(ids.len(), 100, "{name}: the prompt is long enough");
            let vocab = m.model.spec.vocab_size;
            let run = |cuts: &[usize]| {
                let mut state = m.model.new_state(256);
                let mut rows = Vec::new();
                let mut at = 0;
                for &end in cuts.iter().chain([&ids.len()]) {
                    rows.extend(
                        m.model
                            .forward_batch(&mut state, &ids[at..end], Logits::All)
                            .unwrap(),
                    );
                    at = end;
                }
                rows
            };
            let whole = run(&[]);
            assert_eq!(whole.len(), ids.len() * vocab);
            let mut sames = Vec::new();
            for cuts in [
                &[2, 4][..],
                &[29, 31, 50],
                &[17, 57],
                &[60, 98],
                &[3, 40, 80],
            ] {
                let pieces = run(cuts);
                sames.push(
                    whole
                        .iter()
                        .zip(&pieces)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                );
            }
            // The W4A16 kernels' one- and two-token tiles may round differently: the model says
            // so, and prompts then resume only at whole chunks.
            let cut_free = m.model.prompt_cuts_exact();
            assert_eq!(
                cut_free,
                !(exact && name.contains("q4")),
                "{name} exact {exact}"
            );
            // (Whether a W4A16 path does differ depends on the ISA: the AVX-512 one does.)
            if cut_free {
                assert!(sames.iter().all(|&s| s), "{name} exact {exact}: {sames:?}");
            }
            // Where a prompt sharing a beginning resumes: any shared position, leaving two
            // tokens or more of its chunk to run; only whole chunks when cuts matter.
            let c = PREFILL_CHUNK;
            let at = |len, shared| resume_point(&m.model, len, shared);
            assert_eq!(at(c + 44, c + 14), if cut_free { c + 14 } else { c });
            assert_eq!(at(c + 44, c + 44), if cut_free { c + 42 } else { c });
            assert_eq!(at(3 * c, c + 1), if cut_free { c + 1 } else { c });
            assert_eq!(at(3 * c, 2 * c - 1), if cut_free { 2 * c - 2 } else { c });
            assert_eq!(at(c + 1, c + 1), c);
            assert_eq!(at(c + 2, c + 2), c);
            assert_eq!(at(c, c), if cut_free { c - 2 } else { 0 });
            assert_eq!(at(40, 3), if cut_free { 3 } else { 0 });
        }
    }
}
