//! The response bodies as types: the server serializes these, and the same types describe
//! them in `/openapi.json`, so a field cannot be sent that the document does not name. The
//! streamed chunks are built in response.rs from the same parts ([`ChatLogprobs`],
//! [`CompletionLogprobs`], [`Usage`], [`Finish`]).

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Token counts of one answer.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct PromptTokensDetails {
    /// Prompt tokens read from the prompt cache instead of computed.
    pub cached_tokens: usize,
}

/// Why an answer ended (a full context is `length` too).
#[derive(Serialize, ToSchema, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    Stop,
    Length,
    ToolCalls,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        }
    }
}

/// One alternative at a position of a chat answer's `logprobs`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    /// The token's bytes (a byte-level token may be part of a character).
    pub bytes: Vec<u8>,
}

/// One answer token in a chat answer's `logprobs.content`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    /// The `top_logprobs` likeliest tokens at this position.
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
    /// Always null.
    pub refusal: Option<String>,
}

/// The legacy completions `logprobs` object.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    /// Per position: token → log-probability, likeliest first.
    #[schema(value_type = Vec<std::collections::HashMap<String, f32>>)]
    pub top_logprobs: Vec<serde_json::Map<String, Value>>,
    /// Each token's byte offset in the choice's text.
    pub text_offset: Vec<usize>,
}

/// A call the model made: OpenAI's shape, as `pocket run --json` gives it too
/// (`pocket::constrain::tools::ToolCall::openai`), with its index in the list.
#[derive(ToSchema)]
#[allow(dead_code)] // describes the JSON ToolCall::openai builds
pub struct ToolCallOut {
    id: String,
    /// Always `function`.
    #[schema(rename = "type")]
    kind: String,
    function: FunctionCallOut,
    index: usize,
}

#[derive(ToSchema)]
#[allow(dead_code)] // part of ToolCallOut
pub struct FunctionCallOut {
    name: String,
    /// The arguments as a JSON text.
    arguments: String,
}

#[derive(Serialize, ToSchema, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum AssistantRole {
    Assistant,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct AssistantMessage {
    pub role: AssistantRole,
    /// The answer's text; null when the answer is only tool calls.
    pub content: Option<String>,
    /// Always null.
    pub refusal: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<ToolCallOut>)]
    pub tool_calls: Vec<Value>,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Finish,
}

#[derive(Serialize, ToSchema, Debug, Clone, Copy, PartialEq)]
pub enum ChatObject {
    #[serde(rename = "chat.completion")]
    ChatCompletion,
}

/// `POST /v1/chat/completions`' answer without `stream`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ChatCompletion {
    pub id: String,
    pub object: ChatObject,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    /// pocket's version and the kernels the answer ran on.
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Finish,
}

#[derive(Serialize, ToSchema, Debug, Clone, Copy, PartialEq)]
pub enum TextObject {
    #[serde(rename = "text_completion")]
    TextCompletion,
}

/// `POST /v1/completions`' answer without `stream`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct TextCompletion {
    pub id: String,
    pub object: TextObject,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<TextChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// OpenAI's error object.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ErrorDetail {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `rate_limit_error` or `server_error`.
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub kind: String,
    /// The request field at fault, as a path (`messages[2].content`).
    pub param: Option<String>,
    pub code: Option<String>,
}

/// An entry of `GET /v1/models`' `data`, and `GET /v1/models/{id}`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ModelObject {
    pub id: String,
    /// Always `model`.
    pub object: String,
    pub created: u64,
    pub owned_by: String,
}

/// The served model as System One clients list it.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct SystemOneModel {
    pub name: String,
    pub description: String,
    /// YYYY-MM-DD.
    #[schema(pattern = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    pub release_date: String,
}

/// `GET /v1/models`: OpenAI's list and System One's in one object; each client reads its own
/// key.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<ModelObject>,
    pub models: Vec<SystemOneModel>,
}

/// `GET /health`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct Health {
    /// `ok`, or (with a 503) `shutting_down` or `engine_stopped`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots_active: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<usize>,
}

/// An adapter of `GET`/`POST /lora-adapters` (llama.cpp's list, with each adapter's name).
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct LoraAdapter {
    pub id: usize,
    pub name: String,
    pub path: String,
    pub scale: f32,
}
