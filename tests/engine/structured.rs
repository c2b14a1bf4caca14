//! Constrained decoding on the tiny random-weight fixtures. Random weights are the hard case:
//! left alone the model writes byte soup, so every valid answer here is the constraint's
//! doing. Each schema feature is sampled at several seeds and the answer checked by a small
//! validator written for these tests (the independent check, Python's `jsonschema` on real
//! models, is scripts/check_structured.py). The tiny vocabulary (384 byte-level tokens) splits
//! every key across tokens and every Chinese character into its UTF-8 bytes.

use pocket::chat::{ChatSession, ChatSettings};
use pocket::constrain::tools::{parse_tools, ToolChoice};
use pocket::constrain::{AnswerFormat, Constraint, Guide};
use pocket::generate::{generate_text_guided, Control, FinishReason, StopAt, TextGeneration};
use pocket::loader::LoadedModel;
use pocket::sampler::{Sampler, SamplerConfig};
use serde_json::{json, Value};

fn fixture(name: &str) -> LoadedModel {
    let dir = crate::common::root().join("fixtures/tiny").join(name);
    crate::common::open(&dir).expect("open fixture")
}

/// The fixture with a short template that renders `tools` itself, Qwen-style: the tiny
/// models' 256 positions cannot hold the long system-prompt description.
fn with_tool_template(mut m: LoadedModel) -> LoadedModel {
    let source = "{% if tools %}<|im_start|>system\ntools:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}\
{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\
{% for c in m.tool_calls %}<tool_call>{{ c.function.name }} {{ c.function.arguments | tojson }}</tool_call>{% endfor %}\
<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    m.template = Some(
        pocket::chat_template::ChatTemplate::new(source, std::path::Path::new("test")).unwrap(),
    );
    m
}

fn sampler(seed: u64) -> Sampler {
    Sampler::new(SamplerConfig {
        temperature: if seed == 0 { 0.0 } else { 1.0 },
        seed,
        ..SamplerConfig::default()
    })
}

/// One constrained answer to `user`, with the guide after it.
fn answer(
    m: &LoadedModel,
    c: &Constraint,
    user: &str,
    seed: u64,
    max: usize,
) -> (TextGeneration, Guide) {
    let mut guide = m
        .grammars()
        .unwrap()
        .compile(c)
        .unwrap_or_else(|e| panic!("{e}"));
    let prompt = m
        .encode_chat(&[pocket::chat_template::Message::new("user", user)], true)
        .unwrap();
    let mut state = m.model.new_state(2048);
    let stop = StopAt {
        ids: &m.stop_ids,
        strings: &[],
        max_tokens: max,
    };
    let mut streamed = String::new();
    let g = generate_text_guided(
        &m.model,
        &m.tokenizer,
        &mut state,
        &prompt,
        &mut sampler(seed),
        &stop,
        Some(&mut guide),
        |piece| {
            streamed.push_str(piece);
            Control::Continue
        },
    )
    .unwrap();
    assert_eq!(streamed, g.text, "the stream adds up to the answer");
    (g, guide)
}

fn full_match(pattern: &str, s: &str) -> bool {
    fancy_regex::Regex::new(&format!("^(?:{pattern})$"))
        .unwrap()
        .is_match(s)
        .unwrap()
}

/// A validator for the keywords these tests use; `Err` names the place.
fn validate(s: &Value, v: &Value, at: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{at}: {why} (value {v})"));
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
            _ => unreachable!(),
        };
        let ok = types.iter().any(|t| match *t {
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            "object" => v.is_object(),
            "array" => v.is_array(),
            _ => false,
        });
        if !ok {
            return fail(&format!("not of type {t}"));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            return fail(&format!("not the const {c}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return fail("not in the enum");
        }
    }
    if let Some(alts) = s.get("anyOf").and_then(Value::as_array) {
        if !alts.iter().any(|a| validate(a, v, at).is_ok()) {
            return fail("matches no anyOf branch");
        }
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        let n = alts.iter().filter(|a| validate(a, v, at).is_ok()).count();
        if n != 1 {
            return fail(&format!("matches {n} oneOf branches"));
        }
    }
    if let Value::String(text) = v {
        let n = text.chars().count() as u64;
        if s.get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
        {
            return fail("shorter than minLength");
        }
        if s.get("maxLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| n > m)
        {
            return fail("longer than maxLength");
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            // JSON schema patterns search; the test patterns are anchored themselves.
            if !fancy_regex::Regex::new(p).unwrap().is_match(text).unwrap() {
                return fail(&format!("does not match {p}"));
            }
        }
    }
    if let Some(x) = v.as_f64() {
        if s.get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| x < m)
        {
            return fail("below minimum");
        }
        if s.get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| x > m)
        {
            return fail("above maximum");
        }
    }
    if let Value::Array(items) = v {
        let n = items.len() as u64;
        if s.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
        {
            return fail("fewer than minItems");
        }
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n > m)
        {
            return fail("more than maxItems");
        }
        if let Some(item) = s.get("items") {
            for (i, x) in items.iter().enumerate() {
                validate(item, x, &format!("{at}/{i}"))?;
            }
        }
    }
    if let Value::Object(o) = v {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !o.contains_key(r.as_str().unwrap()) {
                return fail(&format!("lacks required {r}"));
            }
        }
        for (k, x) in o {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(ps, x, &format!("{at}/{k}"))?,
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return fail(&format!("has extra key {k:?}"))
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// Every feature the issue lists, each with its strings and arrays bounded so an answer fits.
fn feature_schemas() -> Vec<(&'static str, Value)> {
    let s = |n: u64| json!({"type": "string", "maxLength": n});
    vec![
        (
            "type and required",
            json!({"type": "object", "properties": {"name": s(12), "age": {"type": "integer", "minimum": 0, "maximum": 130}},
            "required": ["name", "age"], "additionalProperties": false}),
        ),
        (
            "type arrays and null",
            json!({"type": "object", "properties": {
            "nick": {"type": ["string", "null"], "maxLength": 8}, "gone": {"type": "null"},
            "score": {"type": ["number", "null"], "minimum": 0, "maximum": 10}},
            "required": ["nick", "gone", "score"], "additionalProperties": false}),
        ),
        (
            "enum and const",
            json!({"type": "object", "properties": {
            "kind": {"const": "order"}, "status": {"enum": ["open", "shipped", "已发货", 3, null]}},
            "required": ["kind", "status"], "additionalProperties": false}),
        ),
        (
            "anyOf",
            json!({"type": "object", "properties": {"id": {"anyOf": [
            {"type": "integer", "minimum": 1, "maximum": 99}, {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}]}},
            "required": ["id"], "additionalProperties": false}),
        ),
        (
            "oneOf tagged",
            json!({"oneOf": [
            {"type": "object", "properties": {"type": {"const": "email"}, "to": s(20)}, "required": ["type", "to"], "additionalProperties": false},
            {"type": "object", "properties": {"type": {"const": "call"}, "number": {"type": "string", "pattern": "^\\+?[0-9]{6,12}$"}},
             "required": ["type", "number"], "additionalProperties": false}]}),
        ),
        (
            "arrays",
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": s(6), "minItems": 2, "maxItems": 3},
            "scores": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 4}},
            "required": ["tags", "scores"], "additionalProperties": false}),
        ),
        (
            "string lengths and patterns",
            json!({"type": "object", "properties": {
            "code": {"type": "string", "minLength": 3, "maxLength": 5}, "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}},
            "required": ["code", "date"], "additionalProperties": false}),
        ),
        (
            "numbers in ranges",
            json!({"type": "object", "properties": {
            "qty": {"type": "integer", "minimum": 1, "maximum": 12}, "neg": {"type": "integer", "minimum": -300, "maximum": -200},
            "price": {"type": "number", "minimum": 0.5, "maximum": 99.5}},
            "required": ["qty", "neg", "price"], "additionalProperties": false}),
        ),
        (
            "nested objects and arrays of objects",
            json!({"type": "object", "properties": {
            "customer": {"type": "object", "properties": {"first_name": s(8), "address": {"type": "object",
                "properties": {"city": s(10), "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"], "additionalProperties": false}},
                "required": ["first_name", "address"], "additionalProperties": false},
            "lines": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {"sku": s(6), "n": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["sku", "n"], "additionalProperties": false}}},
            "required": ["customer", "lines"], "additionalProperties": false}),
        ),
        (
            "non-ASCII keys and values",
            json!({"type": "object", "properties": {
            "姓名": {"type": "string", "maxLength": 4}, "城市": {"enum": ["北京", "上海", "Zürich", "São Paulo"]},
            "备注": {"type": "string", "pattern": "^[一-龥]{1,3}$"}},
            "required": ["姓名", "城市", "备注"], "additionalProperties": false}),
        ),
        (
            "optional properties",
            json!({"type": "object", "properties": {"a": {"type": "boolean"}, "b": s(5)},
            "required": ["a"], "additionalProperties": false}),
        ),
    ]
}

#[test]
fn every_schema_feature_gives_valid_json_at_every_seed() {
    for fixture_name in ["qwen2-tiny", "llama-tiny"] {
        let m = fixture(fixture_name);
        for (name, schema) in feature_schemas() {
            let c = Constraint::json_schema(schema.clone()).unwrap();
            for seed in 0..4 {
                let (g, mut guide) = answer(&m, &c, "Extract the fields as JSON.", seed, 600);
                let what = format!("{fixture_name} / {name} / seed {seed}: {:?}", g.text);
                assert_eq!(g.generation.finish_reason, FinishReason::Stop, "{what}");
                assert!(guide.accepting(), "{what}");
                let v: Value =
                    serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("{what}: {e}"));
                validate(&schema, &v, "").unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}

#[test]
fn fixed_keys_are_forced_and_batched_without_changing_the_answer() {
    // A schema of required keys in order: the keys, quotes, colons and commas are forced.
    let m = fixture("qwen2-tiny");
    let schema = json!({"type": "object", "properties": {
        "customer_reference_number": {"type": "integer", "minimum": 0, "maximum": 9},
        "delivery_instructions": {"enum": ["leave at door", "ring twice"]}},
        "required": ["customer_reference_number", "delivery_instructions"], "additionalProperties": false});
    let c = Constraint::json_schema(schema).unwrap();
    let (g, _) = answer(&m, &c, "hi", 0, 200);
    assert!(
        g.text.starts_with("{\"customer_reference_number\": "),
        "{}",
        g.text
    );
    let n = g.generation.tokens.len();
    assert!(
        g.generation.forced_tokens * 2 > n,
        "{} of {n} tokens forced",
        g.generation.forced_tokens
    );

    // The same answer token by token: the mask alone at every step, no forcing, no batching,
    // no second thread. Greedy, so the tokens must be the same.
    let mut guide = m.grammars().unwrap().compile(&c).unwrap();
    let prompt = m
        .encode_chat(&[pocket::chat_template::Message::new("user", "hi")], true)
        .unwrap();
    let mut state = m.model.new_state(512);
    let mut logits = m
        .model
        .forward_batch(&mut state, &prompt, pocket::model::Logits::Last)
        .unwrap();
    let mut s = sampler(0);
    let mut tokens = Vec::new();
    loop {
        let mask = guide.mask().unwrap();
        let t = s.sample_allowed(&logits, mask.as_slice()).unwrap();
        if m.stop_ids.contains(&t) {
            break;
        }
        tokens.push(t);
        guide.consume(&[t]).unwrap();
        if guide.stopped() {
            break;
        }
        logits = m.model.step(&mut state, t, true).unwrap().unwrap().to_vec();
    }
    assert_eq!(m.tokenizer.decode(&tokens, true), g.text);
}

#[test]
fn choices_regexes_and_grammars_hold_at_every_seed() {
    let m = fixture("qwen2-tiny");
    let labels = ["set_alarm", "set_timer", "weather", "天气", "other"];
    let c = Constraint::choices(labels.iter().map(|s| s.to_string()).collect()).unwrap();
    let re = Constraint::regex("(\\+1 )?[0-9]{3}-[0-9]{4}").unwrap();
    let gbnf = Constraint::grammar(
        "root ::= item (\", \" item){0,2} \".\"\nitem ::= (\"红\" | \"blue\" | [a-c]{1,4})\n",
    )
    .unwrap();
    let lark = Constraint::grammar("start: \"yes\" | \"no\" | NUM\nNUM: /[1-9][0-9]?/\n").unwrap();
    for seed in 0..6 {
        let (g, _) = answer(&m, &c, "classify", seed, 20);
        assert!(
            labels.contains(&g.text.as_str()),
            "seed {seed}: {:?}",
            g.text
        );
        let (g, _) = answer(&m, &re, "phone?", seed, 40);
        assert!(
            full_match("(\\+1 )?[0-9]{3}-[0-9]{4}", &g.text),
            "seed {seed}: {:?}",
            g.text
        );
        let (g, _) = answer(&m, &gbnf, "list", seed, 80);
        assert!(
            full_match(
                "(红|blue|[a-c]{1,4})(, (红|blue|[a-c]{1,4})){0,2}\\.",
                &g.text
            ),
            "seed {seed}: {:?}",
            g.text
        );
        let (g, _) = answer(&m, &lark, "?", seed, 20);
        assert!(
            full_match("yes|no|[1-9][0-9]?", &g.text),
            "seed {seed}: {:?}",
            g.text
        );
    }
}

#[test]
fn an_answer_cut_by_the_token_limit_is_not_complete() {
    let m = fixture("qwen2-tiny");
    let c = Constraint::json_schema(json!({"type": "string", "minLength": 200})).unwrap();
    let (g, mut guide) = answer(&m, &c, "x", 1, 20);
    assert_eq!(g.generation.finish_reason, FinishReason::Length);
    assert!(!guide.accepting(), "{:?}", g.text);
    assert!(serde_json::from_str::<Value>(&g.text).is_err());
}

#[test]
fn unsupported_schemas_are_refused_at_compile_with_the_engine_reason() {
    let m = fixture("qwen2-tiny");
    let g = m.grammars().unwrap();
    for (schema, want) in [
        (
            json!({"type": "string", "format": "no-such-format"}),
            "Unknown format",
        ),
        (
            json!({"type": "integer", "minimum": 5, "maximum": 2}),
            "minimum (5) is greater than maximum (2)",
        ),
    ] {
        let c = Constraint::json_schema(schema).unwrap();
        let e = g.compile(&c).err().expect("refused").0;
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
    }
    let e = g
        .compile(&Constraint::grammar("start: undefined_rule\n").unwrap())
        .err()
        .unwrap()
        .0;
    assert!(e.contains("undefined_rule"), "{e}");
}

/// `json.dumps` spacing (what a template's `tojson` writes) for the flat objects used here.
fn python_json(v: &Value) -> String {
    let o = v.as_object().unwrap();
    let parts: Vec<String> = o
        .iter()
        .map(|(k, x)| format!("{}: {}", json!(k), x))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

const TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather",
  "description": "Current weather", "parameters": {"type": "object", "properties": {
  "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
  "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object",
  "properties": {"time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}},
  "required": ["time"], "additionalProperties": false}}}]"#;

#[test]
fn a_required_tool_call_validates_and_its_result_goes_back_to_the_model() {
    let m = fixture("qwen2-tiny");
    let tm = with_tool_template(fixture("qwen2-tiny"));
    let tools = parse_tools(TOOLS).unwrap();
    for (choice, seed) in [
        (ToolChoice::Required, 1),
        (ToolChoice::Named("set_alarm".into()), 2),
        (ToolChoice::Required, 3),
    ] {
        let mut chat = ChatSession::new(
            &m,
            2048,
            ChatSettings {
                sampler: SamplerConfig {
                    temperature: 1.0,
                    seed,
                    ..SamplerConfig::default()
                },
                max_tokens: 100,
                stop: Vec::new(),
            },
        );
        chat.format = AnswerFormat {
            constraint: None,
            tools: tools.clone(),
            tool_choice: choice.clone(),
        };
        // The tiny template does not take `tools`: they are described in the system prompt.
        let prompt = m.tokenizer.decode(&chat.prompt_ids().unwrap(), false);
        assert!(
            prompt.contains("<tools>") && prompt.contains("\"set_alarm\""),
            "{prompt}"
        );
        // A template that takes them renders them itself.
        let fmt = chat.format.clone();
        let mut chat = ChatSession::new(&tm, 256, chat.settings.clone());
        chat.format = fmt;
        let prompt = m.tokenizer.decode(&chat.prompt_ids().unwrap(), false);
        assert!(
            prompt.starts_with("<|im_start|>system\ntools: get_weather set_alarm"),
            "{prompt}"
        );
        let t = chat.turn("wake me at 7", |_| Control::Continue).unwrap();
        assert!(t.complete, "{:?}", t.text);
        assert_eq!(t.tool_calls.len(), 1, "{:?}", t.text);
        let call = &t.tool_calls[0];
        let tool = tools
            .iter()
            .find(|x| x.name == call.name)
            .expect("a known tool");
        if let ToolChoice::Named(n) = &choice {
            assert_eq!(&call.name, n);
        }
        validate(&tool.parameters, &call.arguments, "")
            .unwrap_or_else(|e| panic!("{e}: {:?}", t.text));
        let last = chat.messages().last().unwrap();
        assert_eq!(last.tool_calls.len(), 1);
        assert_eq!(last.content, "");
        // The call is rendered back through the template in the next prompt.
        let next = m.tokenizer.decode(&chat.prompt_ids().unwrap(), false);
        let rendered = format!(
            "<tool_call>{} {}</tool_call>",
            call.name,
            python_json(&call.arguments)
        );
        assert!(next.contains(&rendered), "{next}\nwants {rendered}");
        // The tool's result is a message of its own, and the model answers it (free text now:
        // the choice applies to every turn, so set it back to auto first).
        chat.format.tool_choice = ToolChoice::Auto;
        let r = chat
            .tool_result(&call.name, "{\"ok\": true}", |_| {}, |_| Control::Continue)
            .unwrap();
        let roles: Vec<&str> = chat.messages().iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
        assert!(r.generation.tokens.len() > 0);
    }
}

#[test]
fn none_offers_no_tools_and_an_untriggered_auto_guide_changes_nothing() {
    let m = with_tool_template(fixture("qwen2-tiny"));
    let tools = parse_tools(TOOLS).unwrap();
    let user = [pocket::chat_template::Message::new("user", "hi")];
    let format = |choice: ToolChoice| AnswerFormat {
        constraint: None,
        tools: tools.clone(),
        tool_choice: choice,
    };
    // none: the prompt is the plain conversation's, no tools described.
    let plain = m.encode_chat(&user, true).unwrap();
    assert_eq!(
        m.encode_answer_prompt(&format(ToolChoice::None), &user)
            .unwrap(),
        plain
    );
    let offered = m
        .encode_answer_prompt(&format(ToolChoice::Auto), &user)
        .unwrap();
    assert!(m
        .tokenizer
        .decode(&offered, false)
        .contains("tools: get_weather set_alarm"));
    // auto: random weights never write "<tool_call>", so the lazy guide never switches on and
    // the answer is the one plain greedy decoding gives for the same prompt.
    let mut chat = ChatSession::new(
        &m,
        256,
        ChatSettings {
            max_tokens: 30,
            ..ChatSettings::default()
        },
    );
    chat.format = format(ToolChoice::Auto);
    let t = chat.turn("hi", |_| Control::Continue).unwrap();
    assert!(t.tool_calls.is_empty() && t.complete, "{:?}", t.text);
    let mut state = m.model.new_state(256);
    let stop = StopAt {
        ids: &m.stop_ids,
        strings: &[],
        max_tokens: 30,
    };
    let free = pocket::generate::generate_text(
        &m.model,
        &m.tokenizer,
        &mut state,
        &offered,
        &mut sampler(0),
        &stop,
        |_| Control::Continue,
    )
    .unwrap();
    assert_eq!(free.text, t.text);
}

#[test]
fn tools_calls_and_results_render_as_transformers_renders_them() {
    // Qwen2.5's own template, rendered by transformers' apply_chat_template
    // (scripts/qwen_tools_reference.py).
    let dir = crate::common::root().join("fixtures/qwen2.5-tools");
    let source = std::fs::read_to_string(dir.join("chat_template.jinja")).unwrap();
    let t = pocket::chat_template::ChatTemplate::new(&source, &dir).unwrap();
    assert!(t.takes_tools());
    let r = crate::common::read_json(&dir.join("reference.json"));
    let tools = parse_tools(&r["tools"].to_string()).unwrap();
    let raw: Vec<Value> = tools.iter().map(|t| t.raw.clone()).collect();
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8);
    for c in cases {
        let messages: Vec<pocket::chat_template::Message> =
            serde_json::from_value(c["messages"].clone()).unwrap();
        let tools = c["tools"].as_bool().unwrap().then_some(raw.as_slice());
        let got = t
            .render_with_tools(&messages, tools, true, "", "<|im_end|>")
            .unwrap();
        assert_eq!(
            got,
            c["rendered"].as_str().unwrap(),
            "{} (tools: {})",
            c["name"],
            tools.is_some()
        );
    }
}
