//! The chat session behind `pocket run`: KV cache reuse across turns gives the same answers as
//! running the whole conversation from scratch, the context is kept by dropping whole old
//! turns, interrupts and stop strings end answers cleanly, and the same seed gives the same
//! text. All on the tiny random-weight fixtures (gibberish, but deterministic).

use pocket::chat::{ChatSession, ChatSettings, Transcript, Turn};
use pocket::chat_template::Message;
use pocket::generate::{generate_text, Control, FinishReason, StopAt};
use pocket::loader::LoadedModel;
use pocket::sampler::{Sampler, SamplerConfig};

fn fixture(name: &str) -> LoadedModel {
    let dir = crate::common::root().join("fixtures/tiny").join(name);
    crate::common::open(&dir).expect("open fixture")
}

fn greedy(max_tokens: usize) -> ChatSettings {
    ChatSettings {
        max_tokens,
        ..ChatSettings::default()
    }
}

/// A turn whose streamed pieces are collected, checking they add up to the kept answer.
fn turn(chat: &mut ChatSession, user: &str) -> Turn {
    let mut streamed = String::new();
    let t = chat
        .turn(user, |piece| {
            streamed.push_str(piece);
            Control::Continue
        })
        .expect("turn");
    assert_eq!(streamed, t.text, "what was shown is what was kept");
    t
}

fn conversation_ids(m: &LoadedModel, system: &str, messages: &[Message]) -> Vec<u32> {
    let mut all = vec![Message::new("system", system)];
    all.extend(messages.iter().cloned());
    m.encode_chat(&all, true).unwrap()
}

#[test]
fn second_turn_prefills_only_new_tokens_and_matches_a_fresh_run() {
    let sampled = ChatSettings {
        // Sampling and penalties too: the sampler is reseeded per turn and its penalty window
        // rebuilt from the reused tokens, so reusing the cache changes nothing.
        sampler: SamplerConfig {
            temperature: 0.9,
            top_k: 40,
            repeat_penalty: 1.3,
            frequency_penalty: 0.2,
            seed: 11,
            ..SamplerConfig::default()
        },
        max_tokens: 6,
        stop: Vec::new(),
    };
    // (fixture, first question, settings, whether the first answer's text encodes back to
    // the tokens the cache holds). Random weights often emit lone UTF-8 bytes, which decode to U+FFFD
    // and encode back differently; then the cache is reused only up to that point, and the
    // answer must still be the same.
    for (name, question, settings, exact) in [
        ("qwen3-tiny", "Write a poem about the sea.", greedy(6), true),
        ("llama-tiny", "hello world", greedy(4), true),
        ("qwen2-tiny", "Hello! What is a cat?", sampled, true),
        ("qwen3-tiny", "Hello! What is a cat?", greedy(12), false),
    ] {
        let m = fixture(name);
        let system = "You answer briefly.";
        let mut chat = ChatSession::new(&m, 256, settings.clone());
        chat.set_system(Some(system.into()));

        let first = turn(&mut chat, question);
        let ids1 = conversation_ids(&m, system, &chat.messages()[..1]);
        assert_eq!((first.reused, first.prefilled), (0, ids1.len()), "{name}");
        // The cache holds the answer but its last token: does that part encode back as is?
        let cached_answer = &first.generation.tokens[..first.generation.tokens.len() - 1];
        let answer_ids = m.tokenizer.encode(&first.text, false).unwrap();
        assert_eq!(
            answer_ids.starts_with(cached_answer),
            exact,
            "{name}: {first:?}"
        );

        let second = turn(&mut chat, "And a dog?");
        let ids2 = conversation_ids(&m, system, &chat.messages()[..3]);
        assert_eq!(second.reused + second.prefilled, ids2.len(), "{name}");
        assert!(
            second.reused >= ids1.len(),
            "{name}: the first prompt is reused"
        );
        if exact {
            // Everything turn 1 left in the cache (its prompt and answer but the last
            // token, sampled and never run) is reused: only the new turn is prefilled.
            assert_eq!(second.reused, first.context_used, "{name}");
            assert_eq!(second.prefilled, ids2.len() - first.context_used, "{name}");
            assert!(second.prefilled * 2 < ids2.len(), "{name}: {second:?}");
        }

        // From scratch: the same conversation loaded into a new session with an empty cache.
        let mut fresh = ChatSession::new(&m, 256, settings);
        fresh
            .restore(Transcript {
                system: Some(system.into()),
                messages: chat.messages()[..2].to_vec(),
                settings: chat.settings.clone(),
            })
            .unwrap();
        let again = turn(&mut fresh, "And a dog?");
        assert_eq!((again.reused, again.prefilled), (0, ids2.len()), "{name}");
        assert_eq!(again.generation.tokens, second.generation.tokens, "{name}");
        assert_eq!(again.text, second.text, "{name}");
    }
}

#[test]
fn reset_and_system_prompt_changes_reuse_what_still_matches() {
    let m = fixture("qwen3-tiny");
    let mut chat = ChatSession::new(&m, 256, greedy(8));
    chat.set_system(Some("Be kind.".into()));
    let first = turn(&mut chat, "Hi");
    chat.reset();
    assert!(chat.messages().is_empty());
    assert_eq!(chat.system(), Some("Be kind."));
    // After /reset the same question gives the same answer, and the system prompt's tokens
    // still come from the cache.
    let again = turn(&mut chat, "Hi");
    assert_eq!(again.generation.tokens, first.generation.tokens);
    assert!(again.reused > 0);
    chat.set_system(Some("Be rude.".into()));
    assert!(chat.messages().is_empty());
    let other = turn(&mut chat, "Hi");
    assert_eq!(chat.messages().len(), 2);
    assert!(other.reused < again.reused + again.prefilled);
}

#[test]
fn a_long_conversation_drops_its_oldest_turns_and_keeps_the_system_prompt() {
    let m = fixture("qwen3-tiny");
    let mut chat = ChatSession::new(&m, 256, greedy(40));
    chat.set_system(Some("System prompt stays.".into()));
    let long = "Tell me more about the weather in the mountains today, please. ".repeat(3);
    let mut dropped = 0;
    for i in 0..8 {
        // The front end hears how many turns were dropped before any answer text arrives,
        // so it can say so before the answer it affects.
        let noted = std::cell::Cell::new(None);
        let texts_before_note = std::cell::Cell::new(0);
        let t = chat
            .turn_noting(
                &format!("{i}: {long}"),
                |n| noted.set(Some(n)),
                |_| {
                    if noted.get().is_none() {
                        texts_before_note.set(texts_before_note.get() + 1);
                    }
                    Control::Continue
                },
            )
            .unwrap();
        assert_eq!(noted.get(), Some(t.dropped_turns));
        assert_eq!(texts_before_note.get(), 0, "on_fit came after answer text");
        dropped += t.dropped_turns;
        let (used, capacity) = chat.context();
        assert!(used <= capacity);
        // Whole turns only: the conversation starts with a user message, and the newest
        // question is the one just asked.
        let msgs = chat.messages();
        assert_eq!(msgs[0].role, "user");
        assert!(msgs[msgs.len() - 2].content.starts_with(&format!("{i}: ")));
    }
    assert!(dropped > 0, "8 long turns cannot fit 256 tokens");
    assert_eq!(chat.system(), Some("System prompt stays."));

    // A message that cannot fit at all is refused, and the conversation is unchanged.
    let before = chat.messages().to_vec();
    let huge = "word ".repeat(400);
    let err = chat.turn(&huge, |_| Control::Continue).unwrap_err();
    assert!(err.to_string().contains("--ctx"), "{err}");
    assert_eq!(chat.messages(), &before[..]);
}

/// With `context_shift`, the turn that outgrows the context runs only its new tokens: the
/// dropped turns' positions leave the cache and the kept ones move down, their keys rotated
/// to the new positions. Layer 0's keys depend on nothing but token and position, so after
/// the shift they must equal a fresh prefill's of the same tokens (f32 cache); the default
/// (re-encoding) runs the kept turns again on the same turn.
#[test]
fn a_context_shift_moves_the_kept_turns_instead_of_running_them_again() {
    let dir = crate::common::root().join("fixtures/tiny/qwen3-tiny");
    let mut config = crate::common::config();
    config.kv = pocket::config::KvPrecision::F32;
    let m = crate::common::open_with(&dir, config).unwrap();
    // Short turns, so several stay when the oldest goes.
    let long = "Tell me more about the weather in the mountains today, please. ";
    let mut chats = [true, false].map(|shift| {
        let mut c = ChatSession::new(&m, 256, greedy(16));
        c.set_system(Some("System prompt stays.".into()));
        c.context_shift = shift;
        c
    });
    let mut checked = false;
    for i in 0..12 {
        let [a, b] = &mut chats;
        let (ts, tr) = (
            turn(a, &format!("{i}: {long}")),
            turn(b, &format!("{i}: {long}")),
        );
        assert_eq!(ts.dropped_turns, tr.dropped_turns);
        if ts.dropped_turns == 0 {
            assert_eq!((ts.text.as_str(), ts.shifted), (tr.text.as_str(), 0));
            continue;
        }
        // The first overflow: the same history so far in both chats.
        assert!(ts.shifted > 0 && tr.shifted == 0);
        assert!(
            ts.prefilled < tr.prefilled,
            "shift ran {} tokens, re-encoding {}",
            ts.prefilled,
            tr.prefilled
        );
        let (chat, ids) = (&chats[0], chats[0].cached_ids().to_vec());
        assert_eq!(chat.cache().len(), ids.len());
        let mut fresh = m.model.new_state(256);
        m.model
            .forward_batch(&mut fresh, &ids, pocket::model::Logits::None)
            .unwrap();
        let keys = |c: &pocket::kv_cache::KvCache, h: usize| match c.layer(0).head(h) {
            pocket::kernels::attn::KvHead::F32 { k, .. } => k.to_vec(),
            _ => unreachable!("an f32 cache"),
        };
        for h in 0..m.model.spec.num_kv_heads {
            let (got, want) = (keys(chat.cache(), h), keys(&fresh.cache, h));
            let worst = got
                .iter()
                .zip(&want)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-4, "layer 0 head {h}: keys off by {worst}");
        }
        // The conversation kept its system prompt and the newest question.
        assert_eq!(chat.system(), Some("System prompt stays."));
        let msgs = chat.messages();
        assert!(msgs[msgs.len() - 2].content.starts_with(&format!("{i}: ")));
        checked = true;
        break;
    }
    assert!(checked, "12 turns overflow 256 positions");
}

#[test]
fn an_interrupted_answer_is_kept_and_the_chat_goes_on() {
    let m = fixture("qwen3-tiny");
    let mut chat = ChatSession::new(&m, 256, greedy(100));
    let mut calls = 0;
    let t = chat
        .turn("Count to a hundred.", |_| {
            calls += 1;
            if calls == 3 {
                Control::Stop
            } else {
                Control::Continue
            }
        })
        .unwrap();
    assert_eq!(t.generation.finish_reason, FinishReason::Interrupted);
    assert_eq!(t.generation.tokens.len(), 3);
    assert_eq!(chat.messages()[1].content, t.text);
    let next = turn(&mut chat, "Go on.");
    assert!(next.reused > 0);
}

#[test]
fn a_stop_string_ends_the_answer_and_is_neither_shown_nor_kept() {
    let m = fixture("qwen3-tiny");
    let mut plain = ChatSession::new(&m, 256, greedy(30));
    let full = turn(&mut plain, "Say something.").text;
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 12, "need a longer answer: {full:?}");
    // A stop string from the middle of the greedy answer.
    let stop: String = chars[8..11].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];

    let mut chat = ChatSession::new(
        &m,
        256,
        ChatSettings {
            stop: vec![stop.clone()],
            ..greedy(30)
        },
    );
    let t = turn(&mut chat, "Say something.");
    assert_eq!(t.text, expected);
    assert_eq!(t.generation.finish_reason, FinishReason::Stop);
    assert!(!chat.messages()[1].content.contains(&stop));
}

#[test]
fn same_seed_and_settings_give_the_same_text() {
    let m = fixture("qwen2-tiny");
    let prompt = m
        .encode_chat(&[Message::new("user", "Write a poem.")], true)
        .unwrap();
    let run = |cfg: SamplerConfig| {
        let mut state = m.model.new_state(256);
        let mut sampler = Sampler::new(cfg);
        let stop = StopAt {
            ids: &[],
            strings: &[],
            max_tokens: 40,
        };
        generate_text(
            &m.model,
            &m.tokenizer,
            &mut state,
            &prompt,
            &mut sampler,
            &stop,
            |_| Control::Continue,
        )
        .unwrap()
    };
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_p: 0.95,
        seed: 1234,
        ..SamplerConfig::default()
    };
    let a = run(cfg.clone());
    let b = run(cfg.clone());
    assert_eq!(a.generation.tokens, b.generation.tokens);
    assert_eq!(a.text, b.text);
    let c = run(SamplerConfig { seed: 1235, ..cfg });
    assert_ne!(a.generation.tokens, c.generation.tokens);
}

#[test]
fn restore_rejects_unknown_roles_and_takes_a_leading_system_message() {
    let m = fixture("qwen3-tiny");
    let mut chat = ChatSession::new(&m, 256, greedy(4));
    let mut t = Transcript {
        messages: vec![
            Message::new("system", "Sys"),
            Message::new("user", "u"),
            Message::new("assistant", "a"),
        ],
        ..Transcript::default()
    };
    chat.restore(t.clone()).unwrap();
    assert_eq!(chat.system(), Some("Sys"));
    assert_eq!(chat.messages().len(), 2);
    // A tool's result is a message of its own (after an assistant's call); other roles are not.
    t.messages.push(Message::new("tool", "x"));
    chat.restore(t.clone()).unwrap();
    t.messages.push(Message::new("robot", "x"));
    assert!(chat.restore(t).unwrap_err().to_string().contains("robot"));
    let json = serde_json::to_value(chat.transcript()).unwrap();
    for key in [
        "temperature",
        "top_k",
        "repeat_penalty",
        "max_tokens",
        "stop",
        "seed",
    ] {
        assert!(json["settings"].get(key).is_some(), "{key} missing: {json}");
    }
}

/// Gemma's sliding-window layers keep a ring of 32 slots for the tiny fixture's window of 8:
/// a next turn reuses the cache past the ring's wrap; an edit further back than the ring holds
/// starts the cache over. Both give the answers of a fresh session.
#[test]
fn a_sliding_window_ring_is_reused_when_it_can_be_and_rebuilt_when_not() {
    let m = fixture("gemma3-tiny");
    let mut chat = ChatSession::new(&m, 256, greedy(12));
    let first = turn(
        &mut chat,
        "Write a poem about the sea, the sky and the wind.",
    );
    assert!(first.context_used > 40, "past the ring: {first:?}");
    let second = turn(&mut chat, "And a dog?");
    assert!(second.reused > 40, "reused past the wrap: {second:?}");
    let fresh_answer = |chat: &ChatSession, user: &str| {
        let mut fresh = ChatSession::new(&m, 256, greedy(12));
        let n = chat.messages().len();
        fresh
            .restore(Transcript {
                system: chat.system().map(str::to_string),
                messages: chat.messages()[..n - 2].to_vec(),
                settings: chat.settings.clone(),
            })
            .unwrap();
        let t = turn(&mut fresh, user);
        assert_eq!(t.reused, 0);
        t.generation.tokens
    };
    assert_eq!(fresh_answer(&chat, "And a dog?"), second.generation.tokens);
    // A new system prompt changes the first turn: the ring no longer holds that far back.
    chat.set_system(Some("Be terse.".into()));
    let third = turn(&mut chat, "Hi");
    assert_eq!(third.reused, 0, "{third:?}");
    assert_eq!(fresh_answer(&chat, "Hi"), third.generation.tokens);
}

/// The system prompt a template adds on its own is found (Qwen2's and the Llama fixture's "You
/// are a helpful assistant."), and it is the one: the conversation with it as its system
/// message renders exactly as the conversation without one. Templates that add none (Qwen3's,
/// Gemma 3's) give none.
#[test]
fn the_templates_own_system_prompt_is_found() {
    for (name, want) in [
        ("qwen2-tiny", Some("You are a helpful assistant.")),
        ("llama-tiny", Some("You are a helpful assistant.")),
        ("qwen3-tiny", None),
        ("gemma3-tiny", None),
    ] {
        let m = fixture(name);
        let got = m.template_system_prompt();
        assert_eq!(got.as_deref().map(str::trim), want, "{name}");
        if let Some(d) = got {
            let user = Message::new("user", "What is 2+2?");
            let with = m
                .render_chat(&[Message::new("system", &d), user.clone()], true)
                .unwrap();
            assert_eq!(with, m.render_chat(&[user], true).unwrap(), "{name}");
        }
    }
}
