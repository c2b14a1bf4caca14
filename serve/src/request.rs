//! Request bodies checked: wire.rs reads them into serde types (a wrong type is a 400 naming
//! the field), and this file checks OpenAI's ranges and the rules between fields, with the same
//! `param`. The result is plain data ([`ChatRequest`], [`CompletionRequest`]); turning it into
//! prompt ids and a constraint needs the model (prompt.rs).

use crate::error::ApiError;
use crate::wire::{self, FormatKind, Int, MessageContent, Num, Prompt, PromptOne, Stop, ToolMode};
use serde_json::Value;

/// Sampling fields shared by both endpoints (`None`: the server's default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<u64>,
}

/// What both endpoints take besides the prompt.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Common {
    pub model: String,
    pub sampling: Sampling,
    pub max_tokens: Option<u64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Token id → bias added to its logit.
    pub logit_bias: Vec<(u32, f32)>,
    /// llama.cpp's `"lora": [{"id", "scale"}]`: the adapters this request runs with (those it
    /// leaves out at scale 0); `None`: the server's current scales.
    pub lora: Option<Vec<(LoraRef, f32)>>,
}

/// An adapter as a request names it: its index in the server's list, or its name.
#[derive(Clone, Debug, PartialEq)]
pub enum LoraRef {
    Id(usize),
    Name(String),
}

/// `"lora": [{"id": 0, "scale": 0.5}, {"id": "name", "scale": 1}]` (llama.cpp's shape; a name
/// is pocket's addition), checked; `param` names the list in errors.
pub fn lora_list(
    items: Vec<wire::LoraScale>,
    param: &str,
) -> Result<Vec<(LoraRef, f32)>, ApiError> {
    if items.len() > 64 {
        return Err(ApiError::invalid(param, "at most 64 adapters"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, it)| {
            let p = format!("{param}[{i}]");
            let id = match it.id {
                Some(wire::AdapterId::Index(n)) => {
                    LoraRef::Id(usize::try_from(n).unwrap_or(usize::MAX))
                }
                Some(wire::AdapterId::Name(s)) => LoraRef::Name(s),
                None => return Err(ApiError::invalid(&format!("{p}.id"), "'id' is required")),
            };
            let scale = number(it.scale, &format!("{p}.scale"), -1e3, 1e3)?.unwrap_or(1.0);
            Ok((id, scale))
        })
        .collect()
}

/// `POST /lora-adapters`' body: the list alone (`param` prefix `body`).
pub fn lora_body(v: &Value) -> Result<Vec<(LoraRef, f32)>, ApiError> {
    let items: Vec<wire::LoraScale> = wire::read(v).map_err(|mut e| {
        e.param = Some(format!("body{}", e.param.as_deref().unwrap_or("")));
        e
    })?;
    lora_list(items, "body")
}

/// One message of a chat request, as the chat template takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct InMessage {
    /// `system` (also for `developer`), `user`, `assistant` or `tool`.
    pub role: String,
    pub content: String,
    pub name: Option<String>,
    /// An assistant's earlier calls: `(id, name, arguments)`, arguments as sent (a JSON text).
    pub tool_calls: Vec<(String, String, String)>,
    pub tool_call_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { name: String, schema: Value },
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoiceIn {
    Auto,
    None,
    Required,
    Named(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub common: Common,
    pub messages: Vec<InMessage>,
    pub response_format: ResponseFormat,
    /// The `tools` array as sent (checked against the model in prompt.rs).
    pub tools: Option<Value>,
    pub tool_choice: Option<ToolChoiceIn>,
    pub logprobs: bool,
    pub top_logprobs: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PromptIn {
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    pub common: Common,
    pub prompt: PromptIn,
    pub echo: bool,
    /// Legacy `logprobs`: how many alternatives per token (0–5); `None`: no logprobs.
    pub logprobs: Option<usize>,
}

/// The body as a JSON object: not UTF-8, not JSON, or not an object is a 400.
pub fn parse_body(bytes: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::body(format!(
            "The request body is not valid UTF-8 (first bad byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ApiError::body(format!(
            "The request body is not valid JSON: {e} (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    match v {
        Value::Object(_) => Ok(v),
        other => Err(ApiError::body(format!(
            "The request body must be a JSON object, not {}",
            kind(&other)
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A number in `lo..=hi` (finite).
fn number(v: Option<Num>, p: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match v {
        None => Ok(None),
        Some(Num(x)) if (lo..=hi).contains(&x) => Ok(Some(x as f32)),
        Some(Num(x)) => Err(ApiError::invalid(
            p,
            format!("'{p}' must be between {lo} and {hi}; got {x}"),
        )),
    }
}

/// An integer in `lo..=hi`.
fn integer(v: Option<Int>, p: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match v {
        None => Ok(None),
        Some(Int(n)) if (lo..=hi).contains(&n) => Ok(Some(n)),
        Some(Int(n)) => Err(ApiError::invalid(
            p,
            format!("'{p}' must be an integer from {lo} to {hi}; got {n}"),
        )),
    }
}

/// Fields both endpoints read.
fn common(body: &Value) -> Result<Common, ApiError> {
    let f: wire::CommonFields = wire::read(body)?;
    let model = f
        .model
        .ok_or_else(|| ApiError::invalid("model", "'model' is required"))?;
    match integer(f.n, "n", 1, i64::MAX)? {
        None | Some(1) => {}
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("'n' must be 1 (one choice per request); got {n}"),
            ))
        }
    }
    let max_tokens = match (
        integer(f.max_tokens, "max_tokens", 1, i64::MAX)?,
        integer(
            f.max_completion_tokens,
            "max_completion_tokens",
            1,
            i64::MAX,
        )?,
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map(|n| n as u64);
    let stop = match f.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(a)) if a.len() > 16 => {
            return Err(ApiError::invalid(
                "stop",
                format!("'stop' takes at most 16 strings; got {}", a.len()),
            ))
        }
        Some(Stop::Many(a)) => a,
    };
    let stream = f.stream.unwrap_or(false);
    let include_usage = match f.stream_options {
        None => false,
        Some(_) if !stream => {
            return Err(ApiError::invalid(
                "stream_options",
                "'stream_options' is only allowed when 'stream' is true",
            ))
        }
        Some(so) => so.include_usage.unwrap_or(false),
    };
    let logit_bias = match f.logit_bias {
        None => Vec::new(),
        Some(m) if m.len() > 1024 => {
            return Err(ApiError::invalid(
                "logit_bias",
                "'logit_bias' takes at most 1024 tokens",
            ))
        }
        Some(m) => {
            let mut out = Vec::with_capacity(m.len());
            for (k, b) in m {
                let p = format!("logit_bias.{k}");
                let id: u32 = k.parse().map_err(|_| {
                    ApiError::invalid(&p, format!("'logit_bias' keys are token ids; got {k:?}"))
                })?;
                let b = number(Some(b), &p, -100.0, 100.0)?.unwrap_or(0.0);
                out.push((id, b));
            }
            out
        }
    };
    let lora = f.lora.map(|l| lora_list(l, "lora")).transpose()?;
    let sampling = Sampling {
        temperature: number(f.temperature, "temperature", 0.0, 2.0)?,
        top_p: number(f.top_p, "top_p", 0.0, 1.0)?,
        top_k: integer(f.top_k, "top_k", 0, u32::MAX as i64)?.map(|k| k as usize),
        min_p: number(f.min_p, "min_p", 0.0, 1.0)?,
        repeat_penalty: number(f.repeat_penalty, "repeat_penalty", 1e-3, 100.0)?,
        presence_penalty: number(f.presence_penalty, "presence_penalty", -2.0, 2.0)?,
        frequency_penalty: number(f.frequency_penalty, "frequency_penalty", -2.0, 2.0)?,
        seed: f.seed.map(|Int(s)| s as u64),
    };
    Ok(Common {
        model,
        sampling,
        max_tokens,
        stop,
        stream,
        include_usage,
        logit_bias,
        lora,
    })
}

/// A message's `content`: a string, or an array of text parts (other part types are refused:
/// the models served read text only).
fn content(v: Option<MessageContent>, p: &str) -> Result<Option<String>, ApiError> {
    match v {
        None => Ok(None),
        Some(MessageContent::Text(s)) => Ok(Some(s)),
        Some(MessageContent::Parts(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.into_iter().enumerate() {
                let pp = format!("{p}[{i}]");
                match part.kind.as_deref() {
                    Some("text") => text.push_str(
                        &part
                            .text
                            .ok_or_else(|| ApiError::invalid(&pp, "a text part needs 'text'"))?,
                    ),
                    Some(t) => {
                        return Err(ApiError::invalid(
                            &format!("{pp}.type"),
                            format!("content parts of type {t:?} are not supported: this server's models read text only"),
                        ))
                    }
                    None => return Err(ApiError::invalid(&pp, "a content part needs 'type'")),
                }
            }
            Ok(Some(text))
        }
    }
}

fn message(m: wire::Message, i: usize) -> Result<InMessage, ApiError> {
    let p = format!("messages[{i}]");
    let role = m
        .role
        .ok_or_else(|| ApiError::invalid(&format!("{p}.role"), format!("{p} needs a 'role'")))?
        .template_name();
    let text = content(m.content, &format!("{p}.content"))?;
    let mut tool_calls = Vec::new();
    if let Some(calls) = m.tool_calls {
        if role != "assistant" {
            return Err(ApiError::invalid(
                &format!("{p}.tool_calls"),
                "only assistant messages carry 'tool_calls'",
            ));
        }
        for (j, c) in calls.into_iter().enumerate() {
            let cp = format!("{p}.tool_calls[{j}]");
            let Some(func) = c.function else {
                return Err(ApiError::invalid(
                    &format!("{cp}.function"),
                    "a tool call needs a 'function' object",
                ));
            };
            let name = func.name.ok_or_else(|| {
                ApiError::invalid(&format!("{cp}.function.name"), "a tool call needs a name")
            })?;
            let args = func.arguments.unwrap_or_else(|| "{}".to_string());
            tool_calls.push((c.id.unwrap_or_default(), name, args));
        }
    }
    if role == "tool" && m.tool_call_id.is_none() {
        return Err(ApiError::invalid(
            &format!("{p}.tool_call_id"),
            "a tool message needs 'tool_call_id' (the id of the call it answers)",
        ));
    }
    let content = match text {
        Some(t) => t,
        None if role == "assistant" => String::new(),
        None => {
            return Err(ApiError::invalid(
                &format!("{p}.content"),
                format!("{p} ({role}) needs 'content'"),
            ))
        }
    };
    Ok(InMessage {
        role: role.to_string(),
        content,
        name: m.name,
        tool_calls,
        tool_call_id: m.tool_call_id,
    })
}

fn response_format(v: Option<wire::ResponseFormat>) -> Result<ResponseFormat, ApiError> {
    let Some(v) = v else {
        return Ok(ResponseFormat::Text);
    };
    match v.kind {
        Some(FormatKind::Text) => Ok(ResponseFormat::Text),
        Some(FormatKind::JsonObject) => Ok(ResponseFormat::JsonObject),
        Some(FormatKind::JsonSchema) => {
            let Some(js) = v.json_schema else {
                return Err(ApiError::invalid(
                    "response_format.json_schema",
                    "type json_schema needs a 'json_schema' object",
                ));
            };
            let name = js.name.ok_or_else(|| {
                ApiError::invalid(
                    "response_format.json_schema.name",
                    "'response_format.json_schema.name' is required",
                )
            })?;
            if name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(ApiError::invalid(
                    "response_format.json_schema.name",
                    "the schema's name must be 1 to 64 letters, digits, '_' or '-'",
                ));
            }
            let schema = Value::Object(js.schema.unwrap_or_default());
            Ok(ResponseFormat::JsonSchema { name, schema })
        }
        None => Err(ApiError::invalid(
            "response_format.type",
            "'response_format' needs a 'type'",
        )),
    }
}

fn tool_choice(v: Option<wire::ToolChoice>) -> Result<Option<ToolChoiceIn>, ApiError> {
    Ok(match v {
        None => None,
        Some(wire::ToolChoice::Mode(ToolMode::Auto)) => Some(ToolChoiceIn::Auto),
        Some(wire::ToolChoice::Mode(ToolMode::None)) => Some(ToolChoiceIn::None),
        Some(wire::ToolChoice::Mode(ToolMode::Required)) => Some(ToolChoiceIn::Required),
        Some(wire::ToolChoice::Named(n)) => {
            if n.kind != "function" {
                return Err(ApiError::invalid(
                    "tool_choice.type",
                    "an object tool_choice must have type \"function\"",
                ));
            }
            Some(ToolChoiceIn::Named(n.function.name))
        }
    })
}

pub fn chat(body: &Value) -> Result<ChatRequest, ApiError> {
    let common = common(body)?;
    let f: wire::ChatFields = wire::read(body)?;
    let messages = match f.messages {
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
        Some(a) if a.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "'messages' must hold at least one message",
            ))
        }
        Some(a) => a
            .into_iter()
            .enumerate()
            .map(|(i, m)| message(m, i))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let tools = match f.tools {
        None => None,
        Some(a) if a.is_empty() => None,
        Some(a) => {
            Some(serde_json::to_value(a).map_err(|e| ApiError::invalid("tools", e.to_string()))?)
        }
    };
    let tool_choice = tool_choice(f.tool_choice)?;
    if tools.is_none()
        && matches!(
            tool_choice,
            Some(ToolChoiceIn::Required | ToolChoiceIn::Named(_))
        )
    {
        return Err(ApiError::invalid(
            "tool_choice",
            "'tool_choice' asks for a call but no 'tools' were given",
        ));
    }
    let logprobs = f.logprobs.unwrap_or(false);
    let top_logprobs = integer(f.top_logprobs, "top_logprobs", 0, 20)?;
    if top_logprobs.is_some_and(|n| n > 0) && !logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "'top_logprobs' needs 'logprobs': true",
        ));
    }
    Ok(ChatRequest {
        common,
        messages,
        response_format: response_format(f.response_format)?,
        tools,
        tool_choice,
        logprobs,
        top_logprobs: top_logprobs.unwrap_or(0) as usize,
    })
}

pub fn completion(body: &Value) -> Result<CompletionRequest, ApiError> {
    let common = common(body)?;
    let f: wire::CompletionFields = wire::read(body)?;
    let prompt = match f.prompt {
        None => return Err(ApiError::invalid("prompt", "'prompt' is required")),
        Some(Prompt::Text(s)) => PromptIn::Text(s),
        Some(Prompt::Ids(ids)) if ids.is_empty() => {
            return Err(ApiError::invalid("prompt", "'prompt' is empty"))
        }
        Some(Prompt::Ids(ids)) => PromptIn::Ids(ids),
        Some(Prompt::Nested(mut a)) if a.len() == 1 => match a.remove(0) {
            PromptOne::Text(s) => PromptIn::Text(s),
            PromptOne::Ids(ids) => PromptIn::Ids(ids),
        },
        Some(Prompt::Nested(_)) => {
            return Err(ApiError::invalid(
                "prompt",
                "'prompt' must be a string, a token id array, or an array of exactly one of them (one prompt per request)",
            ))
        }
    };
    if f.suffix.is_some() {
        return Err(ApiError::invalid(
            "suffix",
            "'suffix' (insertion) is not supported",
        ));
    }
    match integer(f.best_of, "best_of", 1, i64::MAX)? {
        None | Some(1) => {}
        Some(_) => return Err(ApiError::invalid("best_of", "'best_of' must be 1")),
    }
    let echo = f.echo.unwrap_or(false);
    let logprobs = integer(f.logprobs, "logprobs", 0, 5)?.map(|n| n as usize);
    if echo && logprobs.is_some() {
        return Err(ApiError::invalid(
            "logprobs",
            "'logprobs' with 'echo' (the prompt's own log-probabilities) is not supported",
        ));
    }
    Ok(CompletionRequest {
        common,
        prompt,
        echo,
        logprobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat_of(v: Value) -> Result<ChatRequest, ApiError> {
        chat(&v)
    }

    #[test]
    fn a_full_request_reads_every_field() {
        let r = chat_of(json!({
            "model": "m", "temperature": 0.5, "top_p": 0.9, "max_completion_tokens": 7,
            "stop": ["x", "y"], "seed": 3, "n": 1, "stream": true,
            "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
            "logit_bias": {"12": -100}, "unknown_field": {"ignored": true},
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}},
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}
            ]
        }))
        .unwrap();
        assert_eq!(r.common.max_tokens, Some(7));
        assert_eq!(r.common.stop, ["x", "y"]);
        assert!(r.common.include_usage && r.logprobs && r.top_logprobs == 2);
        assert_eq!(r.common.logit_bias, [(12, -100.0)]);
        assert_eq!(r.messages[0].role, "system");
        assert_eq!(r.messages[1].content, "hi there");
        assert_eq!(r.messages[2].tool_calls[0].1, "f");
        assert_eq!(r.messages[3].tool_call_id.as_deref(), Some("call_1"));
        assert!(matches!(
            r.response_format,
            ResponseFormat::JsonSchema { .. }
        ));
    }

    #[test]
    fn wrong_types_and_values_name_the_field() {
        let base = || json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let cases: Vec<(Value, &str)> = vec![
            (json!({"messages": []}), "model"),
            (json!({"model": 1, "messages": []}), "model"),
            (json!({"model": "m"}), "messages"),
            (json!({"model": "m", "messages": []}), "messages"),
            (json!({"model": "m", "messages": "hi"}), "messages"),
            (json!({"model": "m", "messages": [1]}), "messages[0]"),
            (
                json!({"model": "m", "messages": [{"role": "bot", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}]}),
                "messages[0].content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
                "messages[0].tool_call_id",
            ),
        ];
        for (v, param) in cases {
            let e = chat_of(v.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{v}: {e:?}");
            assert_eq!(e.status, 400);
        }
        for (field, value) in [
            ("temperature", json!("hot")),
            ("temperature", json!(2.5)),
            ("top_p", json!(-0.1)),
            ("max_tokens", json!(0)),
            ("max_tokens", json!(1.5)),
            ("max_tokens", json!("9")),
            ("n", json!(2)),
            ("stop", json!(3)),
            ("stream", json!("yes")),
            ("stream_options", json!({"include_usage": true})),
            ("seed", json!("x")),
            ("logit_bias", json!({"a": 1})),
            ("logprobs", json!(1)),
            ("top_logprobs", json!(3)),
            ("top_logprobs", json!(21)),
            ("response_format", json!({"type": "xml"})),
            ("response_format", json!({"type": "json_schema"})),
            ("tools", json!({})),
            ("tool_choice", json!("always")),
            ("tool_choice", json!("required")),
            ("presence_penalty", json!(3)),
        ] {
            let mut v = base();
            v[field] = value.clone();
            let e = chat_of(v).unwrap_err();
            let p = e.param.clone().unwrap_or_default();
            assert!(p.starts_with(field), "{field} = {value}: {e:?}");
        }
        // Huge integers are integers (then capped by the server), not errors.
        let mut v = base();
        v["max_tokens"] = json!(1u64 << 62);
        assert_eq!(chat_of(v).unwrap().common.max_tokens, Some(1 << 62));
    }

    #[test]
    fn bodies_that_are_not_json_objects() {
        assert!(parse_body(b"\xff\xfe")
            .unwrap_err()
            .message
            .contains("UTF-8"));
        assert!(parse_body(b"{")
            .unwrap_err()
            .message
            .contains("not valid JSON"));
        assert!(parse_body(b"[1]").unwrap_err().message.contains("an array"));
        assert!(parse_body(b"{}").is_ok());
    }

    #[test]
    fn completion_prompts() {
        let c = |v: Value| completion(&v);
        assert_eq!(
            c(json!({"model": "m", "prompt": [1, 2]})).unwrap().prompt,
            PromptIn::Ids(vec![1, 2])
        );
        assert_eq!(
            c(json!({"model": "m", "prompt": ["a"]})).unwrap().prompt,
            PromptIn::Text("a".into())
        );
        for bad in [json!(["a", "b"]), json!([]), json!([-1]), json!(7)] {
            assert!(c(json!({"model": "m", "prompt": bad})).is_err(), "{bad}");
        }
        assert!(c(json!({"model": "m", "prompt": "a", "suffix": "b"})).is_err());
        assert!(c(json!({"model": "m", "prompt": "a", "echo": true, "logprobs": 1})).is_err());
    }
}
