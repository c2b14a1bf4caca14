//! The request bodies as they arrive: serde types, and the same types describe them in
//! `/openapi.json` (utoipa), so the document cannot say one thing while the parser does
//! another. A body is read twice from its JSON value, once as [`CommonFields`] and once as the
//! endpoint's own fields, instead of one struct with `#[serde(flatten)]`: flattening loses the
//! path of a wrong field, and every 400 names the field (`param`). Ranges, lengths and the
//! rules between fields are checked after, in request.rs.
//!
//! As in OpenAI's API, unknown fields are ignored and `null` reads as absent.

use crate::error::ApiError;
use serde::de::{self, DeserializeOwned, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use utoipa::ToSchema;

/// Reads `T` from a body's JSON value; a wrong type is a 400 naming the field's path
/// (`messages[0].content`).
pub fn read<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let mut param = String::new();
        for seg in e.path().iter() {
            match seg {
                serde_path_to_error::Segment::Seq { index } => param += &format!("[{index}]"),
                serde_path_to_error::Segment::Map { key } => {
                    if !param.is_empty() {
                        param.push('.');
                    }
                    param += key;
                }
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => {}
            }
        }
        let why = e.into_inner().to_string();
        if param.is_empty() {
            ApiError::body(format!("The request body is not a valid request: {why}"))
        } else {
            ApiError::invalid(&param, format!("'{param}': {why}"))
        }
    })
}

/// An integer as clients send one: a JSON integer, or a float with no fraction (Python
/// clients send `5.0`). Integers past `i64::MAX` read as `i64::MAX` (then capped by range).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Int(pub i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Int, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Int, E> {
                Ok(Int(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Int, E> {
                if v.fract() == 0.0 && v.abs() < 9e15 {
                    Ok(Int(v as i64))
                } else {
                    Err(E::invalid_type(Unexpected::Float(v), &self))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Any JSON number, as f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Num(pub f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// The fields both `/v1/chat/completions` and `/v1/completions` take: the model, sampling,
/// length, stops, streaming, biases and adapters.
#[derive(Deserialize, ToSchema, Debug, Default)]
#[serde(expecting = "a JSON object")]
pub struct CommonFields {
    /// The served model's name (`GET /v1/models`).
    #[schema(required = true, nullable = false)]
    pub model: Option<String>,
    /// Only 1: one choice per request.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1)]
    pub n: Option<Int>,
    /// The answer's length limit in tokens (default: the server's `--max-tokens-default`).
    #[schema(value_type = Option<i64>, minimum = 1)]
    pub max_tokens: Option<Int>,
    /// The same as `max_tokens` (OpenAI's newer name); given both, the smaller counts.
    #[schema(value_type = Option<i64>, minimum = 1)]
    pub max_completion_tokens: Option<Int>,
    /// Up to 16 strings that end the answer (left out of it).
    pub stop: Option<Stop>,
    /// Server-sent events, one chunk per piece of text.
    pub stream: Option<bool>,
    /// Only with `stream`: `include_usage` adds a last chunk with the token counts.
    pub stream_options: Option<StreamOptions>,
    /// Token id (as a string) → a bias from -100 to 100 added to its logit; at most 1024.
    #[schema(value_type = Option<BTreeMap<String, f64>>)]
    pub logit_bias: Option<BTreeMap<String, Num>>,
    /// llama.cpp's per-request adapter scales; adapters left out run at scale 0. Without it,
    /// the server's current scales (`POST /lora-adapters`).
    #[schema(max_items = 64)]
    pub lora: Option<Vec<LoraScale>>,
    /// Seeds the sampler (any 64-bit integer).
    #[schema(value_type = Option<i64>)]
    pub seed: Option<Int>,
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 2)]
    pub temperature: Option<Num>,
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1)]
    pub top_p: Option<Num>,
    /// 0: off.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4294967295_i64)]
    pub top_k: Option<Int>,
    #[schema(value_type = Option<f64>, minimum = 0, maximum = 1)]
    pub min_p: Option<Num>,
    /// llama.cpp's repeat penalty (1: off).
    #[schema(value_type = Option<f64>, minimum = 0.001, maximum = 100)]
    pub repeat_penalty: Option<Num>,
    #[schema(value_type = Option<f64>, minimum = -2, maximum = 2)]
    pub presence_penalty: Option<Num>,
    #[schema(value_type = Option<f64>, minimum = -2, maximum = 2)]
    pub frequency_penalty: Option<Num>,
}

/// One stop string, or a list of them.
#[derive(Deserialize, ToSchema, Debug, Clone, PartialEq)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "an object")]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// `{"id": 0, "scale": 0.5}`: an adapter by its index in the server's list, or by name.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "an object with 'id' and 'scale'")]
pub struct LoraScale {
    #[schema(required = true, nullable = false)]
    pub id: Option<AdapterId>,
    /// From -1000 to 1000 (default 1).
    #[schema(value_type = Option<f64>, minimum = -1000, maximum = 1000)]
    pub scale: Option<Num>,
}

#[derive(Deserialize, ToSchema, Debug, Clone)]
#[serde(untagged, expecting = "an adapter's index (0, 1, …) or name")]
pub enum AdapterId {
    #[schema(value_type = u64)]
    Index(u64),
    Name(String),
}

/// The fields only `/v1/chat/completions` takes.
#[derive(Deserialize, ToSchema, Debug, Default)]
#[serde(expecting = "a JSON object")]
pub struct ChatFields {
    /// The conversation, at least one message.
    #[schema(required = true, nullable = false, min_items = 1)]
    pub messages: Option<Vec<Message>>,
    pub response_format: Option<ResponseFormat>,
    /// Functions the model may call (its chat template must support tools).
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<ToolChoice>,
    /// Accepted; calls are made one at a time.
    #[allow(dead_code)] // read for its type check only
    pub parallel_tool_calls: Option<bool>,
    /// Each answer token's log-probability.
    pub logprobs: Option<bool>,
    /// With `logprobs`: the N likeliest tokens at each position.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 20)]
    pub top_logprobs: Option<Int>,
}

/// One message. `developer` reads as `system`; a `tool` message answers a call by its id.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "a message object")]
pub struct Message {
    #[schema(required = true, nullable = false)]
    pub role: Option<Role>,
    /// Required except on an assistant message that carries `tool_calls`.
    pub content: Option<MessageContent>,
    pub name: Option<String>,
    /// An assistant's earlier calls.
    pub tool_calls: Option<Vec<ToolCallIn>>,
    /// On a `tool` message: the id of the call it answers.
    pub tool_call_id: Option<String>,
}

#[derive(Deserialize, ToSchema, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role as the chat template takes it (`developer` is `system`).
    pub fn template_name(self) -> &'static str {
        match self {
            Role::System | Role::Developer => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// Text, or an array of text parts (the models served read text only).
#[derive(Deserialize, ToSchema, Debug)]
#[serde(untagged, expecting = "a string or an array of content parts")]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "a content part object")]
pub struct ContentPart {
    /// Only `text`.
    #[serde(rename = "type")]
    #[schema(required = true, nullable = false)]
    pub kind: Option<String>,
    pub text: Option<String>,
}

#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "a tool call object")]
pub struct ToolCallIn {
    pub id: Option<String>,
    #[schema(required = true, nullable = false)]
    pub function: Option<FunctionCallIn>,
}

#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "an object with 'name' and 'arguments'")]
pub struct FunctionCallIn {
    #[schema(required = true, nullable = false)]
    pub name: Option<String>,
    /// The arguments as a JSON text (default `{}`).
    pub arguments: Option<String>,
}

/// `text` (default), `json_object`, or `json_schema` with a schema the answer must follow.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "an object with a 'type'")]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    #[schema(required = true, nullable = false)]
    pub kind: Option<FormatKind>,
    /// Required with type `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
}

#[derive(Deserialize, ToSchema, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum FormatKind {
    Text,
    JsonObject,
    JsonSchema,
}

#[derive(Deserialize, ToSchema, Debug)]
#[serde(expecting = "an object with 'name' and 'schema'")]
pub struct JsonSchemaFormat {
    /// 1 to 64 letters, digits, '_' or '-'.
    #[schema(required = true, nullable = false, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: Option<String>,
    /// Accepted; answers always follow the schema.
    #[allow(dead_code)] // read for its type check only
    pub strict: Option<bool>,
    /// A JSON schema (the keywords of docs/structured-output.md); default `{}`.
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Map<String, Value>>,
}

/// A function the model may call.
#[derive(Deserialize, Serialize, ToSchema, Debug, Clone)]
#[serde(expecting = "a tool object")]
pub struct Tool {
    /// Only `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDef,
}

#[derive(Deserialize, Serialize, ToSchema, Debug, Clone)]
#[serde(expecting = "a function object")]
pub struct FunctionDef {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The arguments' JSON schema (an object schema).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `auto`, `none`, `required`, or `{"type": "function", "function": {"name": …}}`.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(
    untagged,
    expecting = "auto, none, required or an object naming a function"
)]
pub enum ToolChoice {
    Mode(ToolMode),
    Named(NamedTool),
}

#[derive(Deserialize, ToSchema, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    Auto,
    None,
    Required,
}

#[derive(Deserialize, ToSchema, Debug)]
pub struct NamedTool {
    /// Only `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionName,
}

#[derive(Deserialize, ToSchema, Debug)]
pub struct FunctionName {
    pub name: String,
}

/// The fields only `/v1/completions` takes.
#[derive(Deserialize, ToSchema, Debug, Default)]
#[serde(expecting = "a JSON object")]
pub struct CompletionFields {
    #[schema(required = true, nullable = false)]
    pub prompt: Option<Prompt>,
    /// Also return the prompt in the text.
    pub echo: Option<bool>,
    /// The legacy log-probabilities: the N likeliest tokens at each position (0 to 5).
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 5)]
    pub logprobs: Option<Int>,
    /// Only 1.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1)]
    pub best_of: Option<Int>,
    /// Insertion is not supported: a `suffix` is refused, so the document leaves it out.
    #[schema(ignore)]
    pub suffix: Option<String>,
}

/// One prompt: a text, token ids, or an array holding exactly one of them.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(
    untagged,
    expecting = "a string, an array of token ids, or an array of exactly one of them"
)]
pub enum Prompt {
    Text(String),
    #[schema(value_type = Vec<u32>)]
    Ids(Vec<u32>),
    Nested(Vec<PromptOne>),
}

#[derive(Deserialize, ToSchema, Debug)]
#[serde(untagged, expecting = "a string or an array of token ids")]
pub enum PromptOne {
    Text(String),
    #[schema(value_type = Vec<u32>)]
    Ids(Vec<u32>),
}
