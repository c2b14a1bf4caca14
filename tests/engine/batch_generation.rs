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
/// whole prefill chunks, in place or copied from another slot, and still answer exactly as a
/// fresh one-at-a-time prefill does. Gemma 3's sliding-window rings wrap inside these
/// prompts, so its copies are refused and every prompt runs whole: the fallback is checked too.
#[test]
fn shared_prompt_beginnings_give_fresh_prefill_answers() {
    use pocket::generate::PREFILL_CHUNK;
    for (name, quant) in [
        ("qwen2-tiny", Some("q4")),
        ("llama-tiny", None),
        ("gemma3-tiny", None),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tiny_model(name, quant, tmp.path());
        let m = crate::common::open(&path).unwrap();
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
            let mut run = 0;
            generate_text_queue(
                &m.model,
                &m.tokenizer,
                &mut states,
                || Sampler::new(SamplerConfig::default()),
                &items,
                share,
                |i, g| {
                    run += g.generation.prefill_tokens;
                    got[i] = Some(g.generation.tokens);
                    Ok(())
                },
            )
            .unwrap();
            for (i, (a, b)) in single.iter().zip(&got).enumerate() {
                assert_eq!(Some(a), b.as_ref(), "{name} share {share} prompt {i}");
            }
            let total: usize = prompts.iter().map(Vec::len).sum();
            let expect_reuse = share && name != "gemma3-tiny";
            assert_eq!(
                run < total,
                expect_reuse,
                "{name} share {share}: ran {run} of {total}"
            );
        }
    }
}
