//! `/openapi.json`, generated from the types the server reads and writes: the request bodies
//! of wire.rs (what serde accepts) and the response objects of objects.rs (what the server
//! serializes), by utoipa. So the document and the parser cannot disagree on a field, a type
//! or a required key; ranges are written beside the fields they bound. System One's part is
//! merged in from systemone.openapi.json: its body is checked by the engine (every problem at
//! once, as a 422), not by serde types.
//!
//! The operations below are empty functions: they carry the paths' documentation only (the
//! handlers are axum's, in handlers.rs, routes.rs and decide.rs).
#![allow(dead_code)] // the documentation functions are never called

use crate::objects::{
    ChatCompletion, ErrorBody, Health, LoraAdapter, ModelList, ModelObject, TextCompletion,
};
use crate::wire::{ChatFields, CommonFields, CompletionFields, LoraScale};
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

/// `POST /v1/chat/completions`' body: the common fields and the chat's own (read in two
/// passes; see wire.rs).
// Deserialize only lends `#[serde(flatten)]`, which utoipa renders as `allOf`.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = ChatRequest)]
struct ChatRequestDoc {
    #[serde(flatten)]
    common: CommonFields,
    #[serde(flatten)]
    chat: ChatFields,
}

/// `POST /v1/completions`' body: the common fields and the completion's own.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = CompletionRequest)]
struct CompletionRequestDoc {
    #[serde(flatten)]
    common: CommonFields,
    #[serde(flatten)]
    completion: CompletionFields,
}

/// One server-sent event of a streamed answer: `data: {chunk}` lines, then `data: [DONE]`.
#[derive(ToSchema)]
struct SseEvent {
    data: String,
}

/// The errors both generation endpoints answer with, OpenAI's error object each.
#[derive(IntoResponses)]
enum GenerationErrors {
    /// A wrong field (`param` names it)
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No or a wrong API key
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Not the served model
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The body came too slowly
    #[response(status = 408)]
    Timeout(ErrorBody),
    /// The body is over --max-body
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The queue is full (Retry-After)
    #[response(status = 429)]
    Busy(ErrorBody),
    /// The server is stopping
    #[response(status = 503)]
    Stopping(ErrorBody),
}

#[utoipa::path(post, path = "/v1/chat/completions", operation_id = "createChatCompletion",
    request_body = ChatRequestDoc,
    responses(
        (status = 200, description = "The answer (JSON), or server-sent events with stream: true",
            content((ChatCompletion = "application/json"), (SseEvent = "text/event-stream"))),
        GenerationErrors,
    ))]
fn chat_completions() {}

#[utoipa::path(post, path = "/v1/completions", operation_id = "createCompletion",
    request_body = CompletionRequestDoc,
    responses(
        (status = 200, description = "The completion (JSON), or server-sent events with stream: true",
            content((TextCompletion = "application/json"), (SseEvent = "text/event-stream"))),
        GenerationErrors,
    ))]
fn completions() {}

#[utoipa::path(get, path = "/v1/models", operation_id = "listModels",
    responses(
        (status = 200, description = "The served model", body = ModelList),
        (status = 401, description = "No or a wrong API key", body = ErrorBody),
    ))]
fn list_models() {}

#[utoipa::path(get, path = "/v1/models/{id}", operation_id = "retrieveModel",
    params(("id" = String, Path, description = "The served model's name")),
    responses(
        (status = 200, description = "The model", body = ModelObject),
        (status = 401, description = "No or a wrong API key", body = ErrorBody),
        (status = 404, description = "Not the served model", body = ErrorBody),
    ))]
fn retrieve_model() {}

#[utoipa::path(get, path = "/health", operation_id = "health", security(()),
    responses(
        (status = 200, description = "Serving", body = Health),
        (status = 503, description = "Shutting down, or the engine stopped", body = Health),
    ))]
fn health() {}

#[utoipa::path(get, path = "/metrics", operation_id = "metrics",
    responses(
        (status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"),
        (status = 401, description = "No or a wrong API key", body = ErrorBody),
    ))]
fn metrics() {}

#[utoipa::path(get, path = "/lora-adapters", operation_id = "listLoraAdapters",
    responses(
        (status = 200, description = "The adapters and their current scales", body = Vec<LoraAdapter>),
        (status = 401, description = "No or a wrong API key", body = ErrorBody),
    ))]
fn lora_adapters() {}

#[utoipa::path(post, path = "/lora-adapters", operation_id = "setLoraAdapters",
    request_body = Vec<LoraScale>,
    responses(
        (status = 200, description = "The new scales (adapters left out are at 0)", body = Vec<LoraAdapter>),
        (status = 400, description = "A wrong entry (`param` names it)", body = ErrorBody),
        (status = 401, description = "No or a wrong API key", body = ErrorBody),
        (status = 408, description = "The body came too slowly", body = ErrorBody),
        (status = 413, description = "The body is over --max-body", body = ErrorBody),
    ))]
fn set_lora_adapters() {}

/// The bearer key (`--api-key`); without one the server takes every request.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        doc.security = Some(vec![
            SecurityRequirement::new("bearer", Vec::<String>::new()),
            SecurityRequirement::default(),
        ]);
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "pocket serve",
        version = "1",
        description = "OpenAI-compatible endpoints of pocket serve (docs/serve.md), and System \
            One decisions at /v1/systemone (docs/decisions.md). Unknown request fields are \
            ignored and null reads as absent; a wrong type or value is a 400 with OpenAI's \
            error object naming the field (a 422 with validation details at /v1/systemone)."
    ),
    paths(chat_completions, completions, list_models, retrieve_model, health, metrics,
          lora_adapters, set_lora_adapters),
    components(schemas(ChatRequestDoc, CompletionRequestDoc, SseEvent)),
    modifiers(&Bearer)
)]
struct Doc;

const SYSTEM_ONE: &str = include_str!("systemone.openapi.json");

/// The whole document, with `model` in the request schemas limited to the served name (the
/// server answers any other with a 404).
pub fn document(model_id: &str) -> Value {
    let mut doc = serde_json::to_value(Doc::openapi()).unwrap_or(Value::Null);
    let part: Value = serde_json::from_str(SYSTEM_ONE).unwrap_or(Value::Null);
    for key in ["paths", "components/schemas"] {
        let from = part.pointer(&format!("/{key}")).and_then(Value::as_object);
        let into = doc
            .pointer_mut(&format!("/{key}"))
            .and_then(Value::as_object_mut);
        if let (Some(from), Some(into)) = (from, into) {
            for (k, v) in from {
                // A name both define keeps the generated schema (a test holds them apart).
                into.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    if let Some(m) = doc.pointer_mut("/components/schemas/CommonFields/properties/model") {
        m["enum"] = Value::Array(vec![Value::String(model_id.to_string())]);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in the document points at a schema it defines, System One's part included.
    #[test]
    fn every_reference_resolves() {
        let doc = document("m");
        let text = doc.to_string();
        let mut refs = 0;
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = &part[..part.find('"').unwrap()];
            let ptr = target.trim_start_matches('#');
            assert!(doc.pointer(ptr).is_some(), "{target} does not resolve");
            refs += 1;
        }
        assert!(refs > 20, "{refs} references");
        for path in [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/systemone",
            "/health",
        ] {
            assert!(doc["paths"][path].is_object(), "{path} missing");
        }
    }

    /// System One's schemas and the generated ones have no name in common, so neither hides
    /// the other.
    #[test]
    fn system_ones_names_are_its_own() {
        let generated = serde_json::to_value(Doc::openapi()).unwrap();
        let part: Value = serde_json::from_str(SYSTEM_ONE).unwrap();
        let ours = generated["components"]["schemas"].as_object().unwrap();
        let theirs = part["components"]["schemas"].as_object().unwrap();
        let both: Vec<&String> = theirs.keys().filter(|k| ours.contains_key(*k)).collect();
        assert!(both.is_empty(), "defined twice: {both:?}");
        assert!(part["paths"]["/v1/systemone"].is_object());
    }

    /// The request schemas are the parser's: a body the parser reads into every field
    /// validates, field for field, and the document's required keys are the parser's.
    #[test]
    fn the_request_schemas_name_what_the_parser_reads() {
        let doc = document("m");
        let s = &doc["components"]["schemas"];
        let common = s["CommonFields"]["properties"].as_object().unwrap();
        for f in [
            "model",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "repeat_penalty",
            "presence_penalty",
            "frequency_penalty",
            "seed",
            "n",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "stream",
            "stream_options",
            "logit_bias",
            "lora",
        ] {
            assert!(common.contains_key(f), "CommonFields lacks {f}");
        }
        assert_eq!(s["CommonFields"]["required"], serde_json::json!(["model"]));
        assert_eq!(s["ChatFields"]["required"], serde_json::json!(["messages"]));
        assert_eq!(
            s["CompletionFields"]["required"],
            serde_json::json!(["prompt"])
        );
        assert_eq!(
            s["CommonFields"]["properties"]["model"]["enum"],
            serde_json::json!(["m"])
        );
        assert_eq!(
            s["CommonFields"]["properties"]["temperature"]["maximum"],
            2.0
        );
    }
}
