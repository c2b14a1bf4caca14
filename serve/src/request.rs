//! Request bodies read field by field, with OpenAI's types and ranges: a wrong type or value
//! is a 400 naming the field (`param`), unknown fields are ignored, as OpenAI does. The result
//! is plain data ([`ChatRequest`], [`CompletionRequest`]); turning it into prompt ids and a
//! constraint needs the model (prompt.rs).

use crate::error::ApiError;
use serde_json::{Map, Value};

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
/// is pocket's addition).
pub fn lora_list(v: &Value, param: &str) -> Result<Vec<(LoraRef, f32)>, ApiError> {
    let Value::Array(items) = v else {
        return Err(wrong(param, "an array of objects with 'id' and 'scale'", v));
    };
    if items.len() > 64 {
        return Err(ApiError::invalid(param, "at most 64 adapters"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let p = format!("{param}[{i}]");
            let Value::Object(o) = it else {
                return Err(wrong(&p, "an object with 'id' and 'scale'", it));
            };
            let id = match o.get("id") {
                Some(Value::Number(n)) => {
                    n.as_u64().map(|n| LoraRef::Id(n as usize)).ok_or_else(|| {
                        ApiError::invalid(
                            &format!("{p}.id"),
                            "'id' must be an adapter's index (0, 1, …) or name",
                        )
                    })?
                }
                Some(Value::String(s)) => LoraRef::Name(s.clone()),
                Some(v) => return Err(wrong(&format!("{p}.id"), "an integer or a string", v)),
                None => return Err(ApiError::invalid(&format!("{p}.id"), "'id' is required")),
            };
            let scale = match o.get("scale") {
                None => 1.0,
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && x.abs() <= 1e3)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            &format!("{p}.scale"),
                            "'scale' must be a number from -1000 to 1000",
                        )
                    })?,
            };
            Ok((id, scale as f32))
        })
        .collect()
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
pub fn parse_body(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
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
        Value::Object(o) => Ok(o),
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

fn wrong(param: &str, want: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        param,
        format!("'{param}' must be {want}, not {}", kind(got)),
    )
}

/// Typed access to an object's fields; `null` reads as absent, as in OpenAI's API.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> Fields<'a> {
    fn new(obj: &'a Map<String, Value>, prefix: &str) -> Fields<'a> {
        Fields {
            obj,
            prefix: prefix.to_string(),
        }
    }

    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong(&self.path(key), "a string", v)),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong(&self.path(key), "a boolean", v)),
        }
    }

    /// A finite number in `lo..=hi`.
    fn number(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let x = v
            .as_f64()
            .ok_or_else(|| wrong(&self.path(key), "a number", v))?;
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::invalid(
                &self.path(key),
                format!(
                    "'{}' must be between {lo} and {hi}; got {x}",
                    self.path(key)
                ),
            ));
        }
        Ok(Some(x as f32))
    }

    /// An integer in `lo..=hi` (a float with no fraction is taken, as Python clients send).
    fn integer(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let p = self.path(key);
        let n = match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_u64().map(|_| i64::MAX))
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                        .map(|f| f as i64)
                }),
            _ => None,
        }
        .ok_or_else(|| wrong(&p, "an integer", v))?;
        if !(lo..=hi).contains(&n) {
            return Err(ApiError::invalid(
                &p,
                format!("'{p}' must be an integer from {lo} to {hi}; got {v}"),
            ));
        }
        Ok(Some(n))
    }
}

/// Fields both endpoints read.
fn common(o: &Map<String, Value>) -> Result<Common, ApiError> {
    let f = Fields::new(o, "");
    let model = f
        .string("model")?
        .ok_or_else(|| ApiError::invalid("model", "'model' is required"))?
        .to_string();
    match f.integer("n", 1, i64::MAX)? {
        None | Some(1) => {}
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("'n' must be 1 (one choice per request); got {n}"),
            ))
        }
    }
    let max_tokens = match (
        f.integer("max_tokens", 1, i64::MAX)?,
        f.integer("max_completion_tokens", 1, i64::MAX)?,
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map(|n| n as u64);
    let stop = match f.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            if a.len() > 16 {
                return Err(ApiError::invalid(
                    "stop",
                    format!("'stop' takes at most 16 strings; got {}", a.len()),
                ));
            }
            a.iter()
                .enumerate()
                .map(|(i, s)| match s {
                    Value::String(s) => Ok(s.clone()),
                    v => Err(wrong(&format!("stop[{i}]"), "a string", v)),
                })
                .collect::<Result<_, _>>()?
        }
        Some(v) => return Err(wrong("stop", "a string or an array of strings", v)),
    };
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(so)) => {
            if !stream {
                return Err(ApiError::invalid(
                    "stream_options",
                    "'stream_options' is only allowed when 'stream' is true",
                ));
            }
            Fields::new(so, "stream_options")
                .bool("include_usage")?
                .unwrap_or(false)
        }
        Some(v) => return Err(wrong("stream_options", "an object", v)),
    };
    let logit_bias = match f.get("logit_bias") {
        None => Vec::new(),
        Some(Value::Object(m)) => {
            if m.len() > 1024 {
                return Err(ApiError::invalid(
                    "logit_bias",
                    "'logit_bias' takes at most 1024 tokens",
                ));
            }
            let mut out = Vec::with_capacity(m.len());
            for (k, v) in m {
                let p = format!("logit_bias.{k}");
                let id: u32 = k.parse().map_err(|_| {
                    ApiError::invalid(&p, format!("'logit_bias' keys are token ids; got {k:?}"))
                })?;
                let b = v
                    .as_f64()
                    .filter(|b| (-100.0..=100.0).contains(b))
                    .ok_or_else(|| {
                        ApiError::invalid(&p, format!("'{p}' must be a number from -100 to 100"))
                    })?;
                out.push((id, b as f32));
            }
            out
        }
        Some(v) => return Err(wrong("logit_bias", "an object", v)),
    };
    let lora = match f.get("lora") {
        None | Some(Value::Null) => None,
        Some(v) => Some(lora_list(v, "lora")?),
    };
    let seed = f.integer("seed", i64::MIN, i64::MAX)?.map(|s| s as u64);
    let sampling = Sampling {
        temperature: f.number("temperature", 0.0, 2.0)?,
        top_p: f.number("top_p", 0.0, 1.0)?,
        top_k: f.integer("top_k", 0, u32::MAX as i64)?.map(|k| k as usize),
        min_p: f.number("min_p", 0.0, 1.0)?,
        repeat_penalty: f.number("repeat_penalty", 1e-3, 100.0)?,
        presence_penalty: f.number("presence_penalty", -2.0, 2.0)?,
        frequency_penalty: f.number("frequency_penalty", -2.0, 2.0)?,
        seed,
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
fn content(v: Option<&Value>, p: &str) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                let pp = format!("{p}[{i}]");
                let Value::Object(o) = part else {
                    return Err(wrong(&pp, "a content part object", part));
                };
                let f = Fields::new(o, &pp);
                match f.string("type")? {
                    Some("text") => text.push_str(
                        f.string("text")?
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
        Some(v) => Err(wrong(p, "a string or an array of content parts", v)),
    }
}

fn message(v: &Value, i: usize) -> Result<InMessage, ApiError> {
    let p = format!("messages[{i}]");
    let Value::Object(o) = v else {
        return Err(wrong(&p, "an object", v));
    };
    let f = Fields::new(o, &p);
    let role = f
        .string("role")?
        .ok_or_else(|| ApiError::invalid(&format!("{p}.role"), format!("{p} needs a 'role'")))?;
    let role = match role {
        "system" | "developer" => "system",
        "user" | "assistant" | "tool" => role,
        other => {
            return Err(ApiError::invalid(
                &format!("{p}.role"),
                format!(
                    "unknown role {other:?}: expected system, developer, user, assistant or tool"
                ),
            ))
        }
    };
    let text = content(o.get("content"), &format!("{p}.content"))?;
    let mut tool_calls = Vec::new();
    if let Some(calls) = f.get("tool_calls") {
        let Value::Array(calls) = calls else {
            return Err(wrong(&format!("{p}.tool_calls"), "an array", calls));
        };
        if role != "assistant" {
            return Err(ApiError::invalid(
                &format!("{p}.tool_calls"),
                "only assistant messages carry 'tool_calls'",
            ));
        }
        for (j, c) in calls.iter().enumerate() {
            let cp = format!("{p}.tool_calls[{j}]");
            let Value::Object(co) = c else {
                return Err(wrong(&cp, "an object", c));
            };
            let cf = Fields::new(co, &cp);
            let id = cf.string("id")?.unwrap_or_default().to_string();
            let Some(Value::Object(func)) = cf.get("function") else {
                return Err(ApiError::invalid(
                    &format!("{cp}.function"),
                    "a tool call needs a 'function' object",
                ));
            };
            let ff = Fields::new(func, &format!("{cp}.function"));
            let name = ff.string("name")?.ok_or_else(|| {
                ApiError::invalid(&format!("{cp}.function.name"), "a tool call needs a name")
            })?;
            let args = ff.string("arguments")?.unwrap_or("{}");
            tool_calls.push((id, name.to_string(), args.to_string()));
        }
    }
    let tool_call_id = f.string("tool_call_id")?.map(str::to_string);
    if role == "tool" && tool_call_id.is_none() {
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
        name: f.string("name")?.map(str::to_string),
        tool_calls,
        tool_call_id,
    })
}

fn response_format(v: Option<&Value>) -> Result<ResponseFormat, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(ResponseFormat::Text);
    };
    let Value::Object(o) = v else {
        return Err(wrong("response_format", "an object", v));
    };
    let f = Fields::new(o, "response_format");
    match f.string("type")? {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let Some(Value::Object(js)) = f.get("json_schema") else {
                return Err(ApiError::invalid(
                    "response_format.json_schema",
                    "type json_schema needs a 'json_schema' object",
                ));
            };
            let jf = Fields::new(js, "response_format.json_schema");
            let name = jf.string("name")?.ok_or_else(|| {
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
            jf.bool("strict")?;
            let schema = match jf.get("schema") {
                None => serde_json::json!({}),
                Some(s @ Value::Object(_)) => s.clone(),
                Some(s) => return Err(wrong("response_format.json_schema.schema", "an object", s)),
            };
            Ok(ResponseFormat::JsonSchema {
                name: name.to_string(),
                schema,
            })
        }
        Some(t) => Err(ApiError::invalid(
            "response_format.type",
            format!(
                "unknown response_format type {t:?}: expected text, json_object or json_schema"
            ),
        )),
        None => Err(ApiError::invalid(
            "response_format.type",
            "'response_format' needs a 'type'",
        )),
    }
}

fn tool_choice(v: Option<&Value>) -> Result<Option<ToolChoiceIn>, ApiError> {
    Ok(match v.filter(|v| !v.is_null()) {
        None => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoiceIn::Auto,
            "none" => ToolChoiceIn::None,
            "required" => ToolChoiceIn::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("unknown tool_choice {other:?}: expected auto, none, required or an object naming a function"),
                ))
            }
        }),
        Some(Value::Object(o)) => {
            let f = Fields::new(o, "tool_choice");
            match f.string("type")? {
                Some("function") => {}
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice.type",
                        "an object tool_choice must have type \"function\"",
                    ))
                }
            }
            let name = match f.get("function") {
                Some(Value::Object(func)) => Fields::new(func, "tool_choice.function")
                    .string("name")?
                    .map(str::to_string),
                _ => None,
            }
            .ok_or_else(|| {
                ApiError::invalid(
                    "tool_choice.function.name",
                    "tool_choice needs function.name",
                )
            })?;
            Some(ToolChoiceIn::Named(name))
        }
        Some(v) => return Err(wrong("tool_choice", "a string or an object", v)),
    })
}

pub fn chat(o: &Map<String, Value>) -> Result<ChatRequest, ApiError> {
    let common = common(o)?;
    let messages = match o.get("messages") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("messages", "'messages' is required"))
        }
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "'messages' must hold at least one message",
            ))
        }
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, m)| message(m, i))
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => return Err(wrong("messages", "an array", v)),
    };
    let f = Fields::new(o, "");
    let tools = match f.get("tools") {
        None => None,
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(t @ Value::Array(_)) => Some(t.clone()),
        Some(v) => return Err(wrong("tools", "an array", v)),
    };
    let tool_choice = tool_choice(f.get("tool_choice"))?;
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
    f.bool("parallel_tool_calls")?;
    let logprobs = f.bool("logprobs")?.unwrap_or(false);
    let top_logprobs = f.integer("top_logprobs", 0, 20)?;
    if top_logprobs.is_some_and(|n| n > 0) && !logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "'top_logprobs' needs 'logprobs': true",
        ));
    }
    Ok(ChatRequest {
        common,
        messages,
        response_format: response_format(f.get("response_format"))?,
        tools,
        tool_choice,
        logprobs,
        top_logprobs: top_logprobs.unwrap_or(0) as usize,
    })
}

pub fn completion(o: &Map<String, Value>) -> Result<CompletionRequest, ApiError> {
    let common = common(o)?;
    let f = Fields::new(o, "");
    let ids = |a: &[Value], p: &str| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_u64()
                    .filter(|&n| n <= u32::MAX as u64)
                    .map(|n| n as u32)
                    .ok_or_else(|| wrong(&format!("{p}[{i}]"), "a token id (an integer >= 0)", v))
            })
            .collect()
    };
    let prompt = match f.get("prompt") {
        None => return Err(ApiError::invalid("prompt", "'prompt' is required")),
        Some(Value::String(s)) => PromptIn::Text(s.clone()),
        Some(Value::Array(a)) => match a.as_slice() {
            [] => return Err(ApiError::invalid("prompt", "'prompt' is empty")),
            [Value::String(s)] => PromptIn::Text(s.clone()),
            [Value::Array(inner)] => PromptIn::Ids(ids(inner, "prompt[0]")?),
            [Value::Number(_), ..] => PromptIn::Ids(ids(a, "prompt")?),
            _ => {
                return Err(ApiError::invalid(
                    "prompt",
                    "'prompt' must be a string, a token id array, or an array of exactly one of them (one prompt per request)",
                ))
            }
        },
        Some(v) => return Err(wrong("prompt", "a string or an array", v)),
    };
    if f.get("suffix").is_some() {
        return Err(ApiError::invalid(
            "suffix",
            "'suffix' (insertion) is not supported",
        ));
    }
    match f.integer("best_of", 1, i64::MAX)? {
        None | Some(1) => {}
        Some(_) => return Err(ApiError::invalid("best_of", "'best_of' must be 1")),
    }
    let echo = f.bool("echo")?.unwrap_or(false);
    let logprobs = f.integer("logprobs", 0, 5)?.map(|n| n as usize);
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
        chat(v.as_object().unwrap())
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
        let c = |v: Value| completion(v.as_object().unwrap());
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
