//! `pocket decide` against transformers: on every tiny fixture and every case of
//! `fixtures/decide/reference.json` (made by `fixtures/make_decision_fixtures.py`, which writes
//! the prompts, readouts and calibration again in Python over transformers' logits and hidden
//! states), the prompts' token ids are equal and every probability is within 1e-5 on the f32
//! path. The cases cover each question type, the keys and letters readouts, option-order
//! averaging, both prompt orders, fitted temperatures, a random pointer head in the Dec / kev
//! layout, a probe head, a JSON state and a hostile one (special-token spellings in the state,
//! instructions and keys).

use crate::common::{ids, open_exact, root};
use pocket::decide::{Decider, Head, Order, Settings, Style};
use serde_json::Value;

const TOLERANCE: f64 = 1e-5;

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= TOLERANCE,
        "{what}: pocket {got}, transformers {want} (|diff| {:.2e})",
        (got - want).abs()
    );
}

#[test]
fn decisions_equal_transformers_on_every_fixture_and_readout() {
    let dir = root().join("fixtures/decide");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let cases = reference["cases"].as_object().unwrap();
    let models = reference["models"].as_object().unwrap();
    assert_eq!(models.len(), 4, "every tiny fixture has reference answers");
    let mut checked = 0;
    for (model, results) in models {
        let m = open_exact(&root().join("fixtures/tiny").join(model)).unwrap();
        for (case, spec) in cases {
            let head = spec["head"]
                .as_str()
                .map(|h| Head::load(&dir.join(format!("{model}.{h}.safetensors"))).unwrap())
                .map(std::sync::Arc::new);
            let settings = Settings {
                style: Style::parse(spec["readout"].as_str().unwrap()),
                order: Order::parse(spec["order"].as_str().unwrap()),
                reverse: Some(spec["reverse"].as_bool().unwrap()),
                head,
            };
            let decider = Decider::new(&m, settings).unwrap();
            let body: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!(
                    "{}.request.json",
                    spec["request"].as_str().unwrap()
                )))
                .unwrap(),
            )
            .unwrap();
            let req = decider.parse(&body).unwrap();
            let plan = decider.plan(&req, 256).unwrap();
            let want = &results[case];
            let prompts = want["prompts"].as_array().unwrap();
            assert_eq!(
                plan.variants.len(),
                prompts.len(),
                "{model} {case}: prompts"
            );
            for (v, p) in plan.variants.iter().zip(prompts) {
                assert_eq!(v.tokens, ids(p), "{model} {case}: prompt token ids");
            }
            let mut state = m.model.new_state(256);
            let mut cached = Vec::new();
            let (scores, _) = decider.run(&mut state, &mut cached, &plan, false).unwrap();
            let got = decider.answers(&req, &plan, &scores);
            for (q, a) in want["answers"].as_object().unwrap() {
                let g = &got[q];
                assert_eq!(g["type"], a["type"], "{model} {case} {q}");
                let what = |k: &str| format!("{model} {case} {q} {k}");
                for (k, p) in a["probabilities"].as_object().unwrap() {
                    let gp = match g["type"].as_str() {
                        // A noul answer carries P(yes) alone.
                        Some("noul") => {
                            let yes = g["noul"].as_f64().unwrap();
                            if k == "true" {
                                yes
                            } else {
                                1.0 - yes
                            }
                        }
                        _ => g["probabilities"][k].as_f64().unwrap(),
                    };
                    close(&what(k), gp, p.as_f64().unwrap());
                }
                if let Some(s) = a.get("score") {
                    close(
                        &what("score"),
                        g["score"].as_f64().unwrap(),
                        s.as_f64().unwrap(),
                    );
                }
                if let Some(c) = a.get("choice") {
                    assert_eq!(&g["choice"], c, "{}", what("choice"));
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 4 * 15, "{checked} answers checked");
}

/// The same request answered twice on one state (its shared tokens cached the second time)
/// and on a fresh one gives the same answers; so does a decider that prefills every prompt
/// alone (one question per request).
#[test]
fn cached_and_separate_runs_answer_alike() {
    let dir = root().join("fixtures/decide");
    let m = open_exact(&root().join("fixtures/tiny/qwen2-tiny")).unwrap();
    let decider = Decider::new(&m, Settings::default()).unwrap();
    let body: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ticket.request.json")).unwrap())
            .unwrap();
    let req = decider.parse(&body).unwrap();
    let plan = decider.plan(&req, 256).unwrap();
    let mut state = m.model.new_state(256);
    let mut cached = Vec::new();
    let (first, t1) = decider.run(&mut state, &mut cached, &plan, false).unwrap();
    let (second, t2) = decider.run(&mut state, &mut cached, &plan, false).unwrap();
    assert_eq!(t1.cached, 0);
    assert_eq!(
        t2.cached, plan.shared,
        "the second run reuses the shared prefix"
    );
    assert!(plan.shared > 10, "the questions share the state's tokens");
    for (a, b) in first.raw.iter().zip(&second.raw) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9, "cached run: {x} vs {y}");
        }
    }
    for (qi, q) in req.questions.iter().enumerate() {
        let mut one = req.clone();
        one.questions = vec![q.clone()];
        let p = decider.plan(&one, 256).unwrap();
        let mut st = m.model.new_state(256);
        let (s, _) = decider.run(&mut st, &mut Vec::new(), &p, false).unwrap();
        let together = &first.raw[qi];
        for (x, y) in s.raw[0].iter().zip(together) {
            assert!((x - y).abs() < 1e-4, "{}: alone {x}, together {y}", q.name);
        }
    }
}

/// GGUF decision models (llama.cpp's `<arch>.decision.type` openjev, lev and kev, their
/// temperatures and `systemone` templates) against the reference script's reading of
/// server-decision.cpp over transformers' logits and hidden states: the same prompt ids, and
/// every probability within 1e-5.
#[test]
fn gguf_decision_models_answer_as_llama_cpp_reads_them() {
    let dir = root().join("fixtures/decide");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let cases = reference["native"].as_object().unwrap();
    assert_eq!(cases.len(), 6);
    for (case, want) in cases {
        let m = open_exact(&dir.join(want["model"].as_str().unwrap())).unwrap();
        let decider = Decider::new(&m, Settings::default()).unwrap();
        let kind = case.split('-').next().unwrap();
        assert_eq!(
            decider.readout_name(),
            kind,
            "{case}: the GGUF's decision type"
        );
        let body: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!(
                "{}.request.json",
                want["request"].as_str().unwrap()
            )))
            .unwrap(),
        )
        .unwrap();
        let req = decider.parse(&body).unwrap();
        let plan = decider.plan(&req, 256).unwrap();
        let prompts = want["prompts"].as_array().unwrap();
        assert_eq!(plan.variants.len(), prompts.len(), "{case}: prompts");
        for (v, p) in plan.variants.iter().zip(prompts) {
            assert_eq!(v.tokens, ids(p), "{case}: prompt token ids");
        }
        let mut state = m.model.new_state(256);
        let (scores, _) = decider
            .run(&mut state, &mut Vec::new(), &plan, false)
            .unwrap();
        let got = decider.answers(&req, &plan, &scores);
        for (q, a) in want["answers"].as_object().unwrap() {
            let g = &got[q];
            for (k, p) in a["probabilities"].as_object().unwrap() {
                let gp = match g["type"].as_str() {
                    Some("noul") => {
                        let yes = g["noul"].as_f64().unwrap();
                        if k == "true" {
                            yes
                        } else {
                            1.0 - yes
                        }
                    }
                    _ => g["probabilities"][k].as_f64().unwrap(),
                };
                close(&format!("{case} {q} {k}"), gp, p.as_f64().unwrap());
            }
        }
    }
}

/// A checkpoint directory that carries `decision_head.safetensors` beside its weights (a
/// decision model shipped as the base plus its head) answers through that head with no flag:
/// the reference's pointer case.
#[test]
fn a_head_beside_the_checkpoint_is_used() {
    let dir = root().join("fixtures/decide");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("qwen2-dec");
    std::fs::create_dir_all(&ckpt).unwrap();
    for e in std::fs::read_dir(root().join("fixtures/tiny/qwen2-tiny")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), ckpt.join(e.file_name())).unwrap();
    }
    std::fs::copy(
        dir.join("qwen2-tiny.pointer.safetensors"),
        ckpt.join(pocket::decide::head::IN_CHECKPOINT),
    )
    .unwrap();
    let m = open_exact(&ckpt).unwrap();
    let decider = Decider::new(&m, Settings::default()).unwrap();
    assert_eq!(decider.readout_name(), "pointer");
    let body: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ticket.request.json")).unwrap())
            .unwrap();
    let req = decider.parse(&body).unwrap();
    let plan = decider.plan(&req, 256).unwrap();
    let mut state = m.model.new_state(256);
    let (scores, _) = decider
        .run(&mut state, &mut Vec::new(), &plan, false)
        .unwrap();
    let got = decider.answers(&req, &plan, &scores);
    let want = &reference["models"]["qwen2-tiny"]["ticket-pointer"]["answers"];
    for (q, a) in want.as_object().unwrap() {
        if let Some(c) = a.get("choice") {
            assert_eq!(&got[q]["choice"], c);
            for (k, p) in a["probabilities"].as_object().unwrap() {
                close(
                    &format!("{q} {k}"),
                    got[q]["probabilities"][k].as_f64().unwrap(),
                    p.as_f64().unwrap(),
                );
            }
        }
    }
}
