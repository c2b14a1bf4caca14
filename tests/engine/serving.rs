//! The serving engine (continuous batching across requests) against the single-stream loops:
//! every answer, whatever else shares its decode steps and whatever its slot's cache held
//! before, is token for token and character for character what `generate_text_with` gives
//! the same prompt and settings alone (plain, stop strings, seeded sampling, a JSON schema,
//! lazy tool calls). Also: prefix reuse, log-probabilities against the model's own logits,
//! clients that leave, a full queue, shutdown.

use pocket::constrain::tools::{parse_tools, ToolChoice};
use pocket::constrain::{AnswerFormat, Constraint};
use pocket::generate::{generate_text_with, Assist, Control, FinishReason, StopAt};
use pocket::loader::LoadedModel;
use pocket::model::Logits;
use pocket::sampler::{Sampler, SamplerConfig};
use pocket::serving::{Capacity, Engine, Event, Failure, Finished, Job, Refused, Sink};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

struct ChanSink {
    tx: mpsc::Sender<Event>,
    /// The "client" leaves once this many tokens arrived (0: never).
    leave_after: usize,
    seen: Arc<AtomicUsize>,
    gone: Arc<AtomicBool>,
}

impl Sink for ChanSink {
    fn send(&mut self, event: Event) {
        if let Event::Token { .. } = event {
            let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if self.leave_after > 0 && n >= self.leave_after {
                self.gone.store(true, Ordering::SeqCst);
            }
        }
        let _ = self.tx.send(event);
    }
    fn is_closed(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
}

struct Spec {
    prompt: Vec<u32>,
    sampler: SamplerConfig,
    stop: Vec<String>,
    max_tokens: usize,
    format: Option<AnswerFormat>,
    logprobs: Option<usize>,
}

fn job(m: &LoadedModel, s: &Spec, leave_after: usize) -> (Job, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    let guide = s.format.as_ref().and_then(|f| m.guide_for(f).unwrap());
    let job = Job {
        prompt: s.prompt.clone(),
        sampler: s.sampler.clone(),
        logit_bias: Vec::new(),
        stop: s.stop.clone(),
        max_tokens: s.max_tokens,
        guide,
        logprobs: s.logprobs,
        decision: None,
        lora: None,
        sink: Box::new(ChanSink {
            tx,
            leave_after,
            seen: Arc::new(AtomicUsize::new(0)),
            gone: Arc::new(AtomicBool::new(false)),
        }),
    };
    (job, rx)
}

/// What a job's receiver saw: the streamed text (token pieces and the tail), the events in
/// order, and how it ended.
struct Outcome {
    streamed: String,
    tokens: Vec<Event>,
    cached: usize,
    end: Result<Finished, Failure>,
}

fn collect(rx: &mpsc::Receiver<Event>) -> Outcome {
    let mut out = Outcome {
        streamed: String::new(),
        tokens: Vec::new(),
        cached: 0,
        end: Err(Failure::Engine("no end".into())),
    };
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("an event") {
            Event::Started { cached, .. } => out.cached = cached,
            e @ Event::Token { .. } => {
                if let Event::Token { text, .. } = &e {
                    out.streamed.push_str(text);
                }
                out.tokens.push(e);
            }
            Event::Done(f) => {
                out.streamed.push_str(&f.tail);
                out.end = Ok(f);
                return out;
            }
            Event::Failed(f) => {
                out.end = Err(f);
                return out;
            }
            Event::Decided(_) => panic!("an answer job got a decision"),
        }
    }
}

/// The single-stream answer: `generate_text_with` on a fresh cache.
fn alone(m: &LoadedModel, s: &Spec) -> (Vec<u32>, String, FinishReason) {
    let mut state = m.model.new_state(256);
    let mut sampler = Sampler::new(s.sampler.clone());
    let mut guide = s.format.as_ref().and_then(|f| m.guide_for(f).unwrap());
    let stop = StopAt {
        ids: &m.stop_ids,
        strings: &s.stop,
        max_tokens: s.max_tokens,
    };
    let g = generate_text_with(
        &m.model,
        &m.tokenizer,
        &mut state,
        &s.prompt,
        &mut sampler,
        &stop,
        Assist::guided(guide.as_mut()),
        |_| Control::Continue,
    )
    .unwrap();
    (g.generation.tokens, g.text, g.generation.finish_reason)
}

fn engine(m: &Arc<LoadedModel>, slots: usize, context: usize, queue: usize) -> Engine {
    engine_with_cache(m, slots, context, queue, 64 << 20)
}

fn engine_with_cache(
    m: &Arc<LoadedModel>,
    slots: usize,
    context: usize,
    queue: usize,
    prompt_cache: usize,
) -> Engine {
    Engine::start(
        m.clone(),
        Capacity {
            slots,
            context,
            queue,
            prompt_cache,
        },
    )
    .unwrap()
}

fn quantized(name: &str, tmp: &std::path::Path) -> LoadedModel {
    let out = tmp.join(format!("{name}.pocket"));
    let dir = crate::common::tiny(name);
    let o = crate::common::pocket(&[
        "export",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--calib",
        "none",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    crate::common::open(&out).unwrap()
}

fn specs(m: &LoadedModel) -> Vec<Spec> {
    let chat = |u: &str| {
        m.encode_chat(&[pocket::chat_template::Message::new("user", u)], true)
            .unwrap()
    };
    let greedy = SamplerConfig::default();
    let hot = |seed| SamplerConfig {
        temperature: 0.9,
        top_p: 0.95,
        seed,
        ..SamplerConfig::default()
    };
    let schema = Constraint::json_schema(serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    }))
    .unwrap();
    let tools = parse_tools(
        r#"[{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"], "additionalProperties": false}}}]"#,
    )
    .unwrap();
    let base = |prompt: Vec<u32>, sampler: SamplerConfig, max_tokens: usize| Spec {
        prompt,
        sampler,
        stop: Vec::new(),
        max_tokens,
        format: None,
        logprobs: None,
    };
    let mut v = vec![
        base(chat("Hello there"), greedy.clone(), 24),
        base(
            chat("The quick brown fox jumps over the lazy dog and"),
            hot(7),
            30,
        ),
        base(chat("1 2 3"), greedy.clone(), 5),
        base(
            chat("Once upon a time, in a land far away, there lived"),
            hot(3),
            40,
        ),
        Spec {
            format: Some(AnswerFormat {
                constraint: Some(schema),
                ..AnswerFormat::default()
            }),
            ..base(chat("Ana is 31."), hot(11), 60)
        },
        Spec {
            format: Some(AnswerFormat {
                tools,
                tool_choice: ToolChoice::Required,
                ..AnswerFormat::default()
            }),
            ..base(chat("Weather in Oslo?"), hot(5), 120)
        },
    ];
    // A stop string from the middle of an unstopped answer, so it is met.
    let (_, text, _) = alone(m, &v[0]);
    let chars: Vec<char> = text.chars().collect();
    v[0].stop = vec![
        "\u{1}never".into(),
        chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect(),
    ];
    v
}

#[test]
fn served_answers_equal_single_stream_answers_under_any_load() {
    let tmp = tempfile::tempdir().unwrap();
    // Q4 exports (the int8 kernels) and an unquantized fixture (f32 weights).
    for (name, q4) in [
        ("qwen2-tiny", true),
        ("llama-tiny", true),
        ("llama-tiny", false),
    ] {
        let m = Arc::new(match q4 {
            true => quantized(name, tmp.path()),
            false => crate::common::open(&crate::common::tiny(name)).unwrap(),
        });
        let specs = specs(&m);
        let want: Vec<_> = specs.iter().map(|s| alone(&m, s)).collect();
        // Three slots for six jobs, submitted at once: jobs join and leave the batch as
        // others finish, prompts run beside decode steps.
        let engine = engine(&m, 3, 256, 8);
        for round in 0..2 {
            let rxs: Vec<_> = specs
                .iter()
                .map(|s| {
                    let (j, rx) = job(&m, s, 0);
                    engine.submit(j).map_err(|(r, _)| r).unwrap();
                    rx
                })
                .collect();
            for (i, rx) in rxs.iter().enumerate() {
                let out = collect(rx);
                let f = out.end.unwrap_or_else(|e| panic!("{name} job {i}: {e:?}"));
                assert_eq!(f.tokens, want[i].0, "{name} round {round} job {i}: tokens");
                assert_eq!(f.text, want[i].1, "{name} round {round} job {i}: text");
                assert_eq!(f.reason, want[i].2, "{name} round {round} job {i}: reason");
                assert_eq!(out.streamed, f.text, "{name} job {i}: the stream adds up");
                assert_eq!(f.prompt_tokens, specs[i].prompt.len());
                assert_eq!(f.cached_tokens, out.cached);
                if specs[i].format.is_some() {
                    assert!(f.complete, "{name} job {i}: {}", f.text);
                }
            }
        }
        let s = engine.snapshot();
        assert_eq!(s.finished, 12, "{name}: {s:?}");
        assert!(s.decode_rows > s.decode_steps, "steps were batched: {s:?}");
        // The second round found its prompts' chat-template prefix in the slots, and whole
        // prompts in the prompt cache (so restored caches answer as fresh runs do).
        assert!(s.cached_tokens > 0 && s.jobs_with_reuse > 0, "{s:?}");
        assert!(s.prompt_cache_hits > 0, "{s:?}");
        assert_eq!((s.active, s.waiting), (0, 0));
    }
}

#[test]
fn a_conversation_resent_with_one_more_turn_reuses_its_slot() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(quantized("qwen2-tiny", tmp.path()));
    let engine = engine(&m, 2, 256, 2);
    use pocket::chat_template::Message;
    let mut msgs = vec![Message::new("user", "Tell me about the sea")];
    let first = Spec {
        prompt: m.encode_chat(&msgs, true).unwrap(),
        sampler: SamplerConfig::default(),
        stop: Vec::new(),
        max_tokens: 12,
        format: None,
        logprobs: None,
    };
    let (j, rx) = job(&m, &first, 0);
    engine.submit(j).map_err(|(r, _)| r).unwrap();
    let a = collect(&rx).end.unwrap();
    msgs.push(Message::new("assistant", &a.text));
    msgs.push(Message::new("user", "And the sky?"));
    let second = Spec {
        prompt: m.encode_chat(&msgs, true).unwrap(),
        ..first
    };
    let (j, rx) = job(&m, &second, 0);
    engine.submit(j).map_err(|(r, _)| r).unwrap();
    let out = collect(&rx);
    let b = out.end.unwrap();
    // Everything up to the first answer's text was in the cache.
    assert!(
        out.cached >= first.prompt.len(),
        "cached {} of {} (first prompt {})",
        out.cached,
        second.prompt.len(),
        first.prompt.len()
    );
    let (tokens, text, _) = alone(&m, &second);
    assert_eq!((b.tokens, b.text), (tokens, text));
}

/// One slot, prompts A, B, then A again: B's run took A's slot, so A's second run finds its
/// prompt (all but the last token) in the prompt cache, and answers as it does alone. Without
/// the cache it finds only what it shares with B.
#[test]
fn a_prompt_whose_slot_moved_on_comes_back_from_the_prompt_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(quantized("qwen2-tiny", tmp.path()));
    let chat = |u: &str| {
        m.encode_chat(&[pocket::chat_template::Message::new("user", u)], true)
            .unwrap()
    };
    let spec = |prompt: Vec<u32>| Spec {
        prompt,
        sampler: SamplerConfig::default(),
        stop: Vec::new(),
        max_tokens: 10,
        format: None,
        logprobs: None,
    };
    let (a, b) = (
        spec(chat("Tell me about the sea and its tides")),
        spec(chat("Name three colours")),
    );
    let shared_ab = a
        .prompt
        .iter()
        .zip(&b.prompt)
        .take_while(|(x, y)| x == y)
        .count();
    let want = alone(&m, &a);
    for budget in [64 << 20, 0] {
        let engine = engine_with_cache(&m, 1, 256, 2, budget);
        let mut outs = Vec::new();
        for s in [&a, &b, &a] {
            let (j, rx) = job(&m, s, 0);
            engine.submit(j).map_err(|(r, _)| r).unwrap();
            outs.push(collect(&rx));
        }
        let third = outs.pop().unwrap();
        let snap = engine.snapshot();
        if budget > 0 {
            assert_eq!(third.cached, a.prompt.len() - 1, "{snap:?}");
            assert_eq!(snap.prompt_cache_hits, 1, "{snap:?}");
            assert_eq!(snap.prompt_cache_entries, 2, "{snap:?}");
            assert!(snap.prompt_cache_bytes > 0 && snap.prompt_cache_bytes <= budget);
        } else {
            assert_eq!(third.cached, shared_ab, "{snap:?}");
            assert_eq!((snap.prompt_cache_hits, snap.prompt_cache_entries), (0, 0));
        }
        let f = third.end.unwrap();
        assert_eq!(
            (f.tokens, f.text),
            (want.0.clone(), want.1.clone()),
            "budget {budget}"
        );
    }
}

#[test]
fn logprobs_are_the_models_log_softmax() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(quantized("qwen3-tiny", tmp.path()));
    let prompt = m
        .encode_chat(&[pocket::chat_template::Message::new("user", "hi")], true)
        .unwrap();
    let spec = Spec {
        prompt: prompt.clone(),
        sampler: SamplerConfig::default(),
        stop: Vec::new(),
        max_tokens: 8,
        format: None,
        logprobs: Some(4),
    };
    let engine = engine(&m, 1, 128, 1);
    let (j, rx) = job(&m, &spec, 0);
    engine.submit(j).map_err(|(r, _)| r).unwrap();
    let out = collect(&rx);
    let f = out.end.unwrap();
    // The reference: the model's logits step by step, log-softmax in f64.
    let mut state = m.model.new_state(128);
    let mut logits = m
        .model
        .forward_batch(&mut state, &prompt, Logits::Last)
        .unwrap();
    assert_eq!(out.tokens.len(), f.tokens.len());
    for (e, &t) in out.tokens.iter().zip(&f.tokens) {
        let Event::Token { id, logprob, .. } = e else {
            unreachable!()
        };
        assert_eq!(*id, t);
        let lp = logprob.as_ref().expect("asked for logprobs");
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
        assert!((lp.logprob as f64 - (logits[t as usize] as f64 - z)).abs() < 1e-4);
        assert_eq!(lp.top.len(), 4);
        assert_eq!(lp.top[0].0, t, "greedy takes the most likely token");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        logits = m.model.step(&mut state, t, true).unwrap().unwrap().to_vec();
    }
}

#[test]
fn clients_that_leave_free_their_slots_and_a_full_queue_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(quantized("qwen2-tiny", tmp.path()));
    let engine = engine(&m, 1, 256, 1);
    let long = Spec {
        prompt: m.tokenizer.encode("Once upon a time", true).unwrap(),
        sampler: SamplerConfig {
            temperature: 1.0,
            seed: 1,
            ..SamplerConfig::default()
        },
        stop: Vec::new(),
        max_tokens: 200,
        format: None,
        logprobs: None,
    };
    // The first client leaves after 3 tokens; the second waits behind it; a third is refused.
    let (j1, rx1) = job(&m, &long, 3);
    let (j2, rx2) = job(&m, &long, 5);
    let (j3, _rx3) = job(&m, &long, 0);
    engine.submit(j1).map_err(|(r, _)| r).unwrap();
    engine.submit(j2).map_err(|(r, _)| r).unwrap();
    match engine.submit(j3) {
        Err((Refused::Busy { waiting }, _)) => assert_eq!(waiting, 1),
        other => panic!("expected Busy, got {:?}", other.map_err(|(r, _)| r)),
    }
    for rx in [&rx1, &rx2] {
        // A client that left sees no end; the engine drops the job at its next step.
        let mut n = 0;
        while let Ok(e) = rx.recv_timeout(Duration::from_secs(30)) {
            if let Event::Token { .. } = e {
                n += 1;
            }
            assert!(
                !matches!(e, Event::Done(_)),
                "a gone client's job ran to its end"
            );
        }
        assert!((3..=4).contains(&n) || (5..=6).contains(&n), "{n} tokens");
    }
    let s = engine.snapshot();
    assert_eq!(
        (s.cancelled, s.refused, s.active, s.waiting),
        (2, 1, 0, 0),
        "{s:?}"
    );
    assert_eq!(engine.in_flight(), 0);
}

#[test]
fn shutdown_fails_waiting_jobs_and_lets_running_ones_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(quantized("qwen2-tiny", tmp.path()));
    let engine = engine(&m, 1, 256, 4);
    let spec = Spec {
        prompt: m.tokenizer.encode("Hello", true).unwrap(),
        sampler: SamplerConfig::default(),
        stop: Vec::new(),
        max_tokens: 40,
        format: None,
        logprobs: None,
    };
    let (j1, rx1) = job(&m, &spec, 0);
    let (j2, rx2) = job(&m, &spec, 0);
    engine.submit(j1).map_err(|(r, _)| r).unwrap();
    // The first has a slot before shutdown is asked for.
    assert!(matches!(rx1.recv().unwrap(), Event::Started { .. }));
    engine.submit(j2).map_err(|(r, _)| r).unwrap();
    engine.shutdown(false);
    let (j3, _) = job(&m, &spec, 0);
    assert!(matches!(engine.submit(j3), Err((Refused::ShuttingDown, _))));
    let first = collect(&rx1);
    assert!(first.end.is_ok(), "the running job finishes");
    assert_eq!(collect(&rx2).end.unwrap_err(), Failure::ShuttingDown);
    engine.join();
}

/// Requests with different LoRA adapters (none, one, another at a scale, both) share the
/// engine's decode steps and slots; each answer is token for token what the single-stream loop
/// gives with the same adapters alone, and a slot's cache is reused only under the adapters it
/// was computed with.
#[test]
fn requests_with_different_adapters_share_a_batch_each_answering_as_alone() {
    use pocket::lora::AdapterSet;
    let m = Arc::new(crate::common::open(&crate::common::tiny("qwen2-tiny")).unwrap());
    let open = |name: &str| {
        Arc::new(
            m.model
                .open_adapter(
                    &crate::common::root()
                        .join("fixtures/lora/qwen2-tiny")
                        .join(name),
                    name,
                )
                .unwrap(),
        )
    };
    let (all, patterns) = (open("all"), open("patterns"));
    let sets: Vec<Option<Arc<AdapterSet>>> = vec![
        None,
        Some(Arc::new(AdapterSet {
            adapters: vec![(all.clone(), 1.0)],
        })),
        Some(Arc::new(AdapterSet {
            adapters: vec![(patterns.clone(), 0.7)],
        })),
        Some(Arc::new(AdapterSet {
            adapters: vec![(all, 0.5), (patterns, 1.5)],
        })),
    ];
    let chat = |u: &str| {
        m.encode_chat(&[pocket::chat_template::Message::new("user", u)], true)
            .unwrap()
    };
    let prompts = [
        chat("What is the capital of France?"),
        chat("Write a haiku."),
    ];
    let spec = |p: &[u32]| Spec {
        prompt: p.to_vec(),
        sampler: SamplerConfig::default(),
        stop: Vec::new(),
        max_tokens: 12,
        format: None,
        logprobs: None,
    };
    let e = engine(&m, 3, 256, 16);
    let mut rxs = Vec::new();
    let mut want = Vec::new();
    for p in &prompts {
        for set in &sets {
            let s = spec(p);
            let (mut j, rx) = job(&m, &s, 0);
            j.lora = set.clone();
            e.submit(j).map_err(|(r, _)| r).unwrap();
            rxs.push(rx);
            // Alone, on a fresh state with the same adapters.
            let mut state = m.model.new_state(256);
            state.lora = set.clone();
            let mut sampler = Sampler::new(s.sampler.clone());
            let stop = StopAt {
                ids: &m.stop_ids,
                strings: &[],
                max_tokens: s.max_tokens,
            };
            let g = generate_text_with(
                &m.model,
                &m.tokenizer,
                &mut state,
                &s.prompt,
                &mut sampler,
                &stop,
                Assist::default(),
                |_| Control::Continue,
            )
            .unwrap();
            want.push(g.generation.tokens);
        }
    }
    // The adapters change the answers (else the test would prove nothing).
    assert!(
        want[0] != want[1] && want[1] != want[2],
        "adapters change the answers"
    );
    for (i, (rx, w)) in rxs.iter().zip(&want).enumerate() {
        let out = collect(rx);
        let f = out.end.expect("answered");
        assert_eq!(
            &f.tokens, w,
            "request {i}: the batch answer differs from the lone one"
        );
    }
}
