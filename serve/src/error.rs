//! OpenAI's error object: `{"error": {"message", "type", "param", "code"}}` with the HTTP
//! status a client's retry logic reads (400 bad request, 401, 404 unknown model, 408, 413,
//! 429 with `Retry-After`, 503 while stopping).

use crate::objects::{ErrorBody, ErrorDetail};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    /// The request field at fault, as a dotted path (`messages[2].content`).
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, for a 429's `Retry-After`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// A 400 naming the field at fault.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        if !param.is_empty() {
            e.param = Some(param.to_string());
        }
        e
    }

    /// A 400 about the body as a whole (not JSON, not an object).
    pub fn body(message: impl Into<String>) -> ApiError {
        ApiError::invalid("", message)
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Incorrect or missing API key: send 'Authorization: Bearer KEY' with the key the \
             server was started with",
        )
        .with_code("invalid_api_key")
    }

    pub fn model_not_found(asked: &str, served: &str) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model '{asked}' does not exist: this server serves '{served}'"),
        )
        .with_code("model_not_found");
        e.param = Some("model".into());
        e
    }

    pub fn not_found(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("No such endpoint: {path} (see /openapi.json)"),
        )
    }

    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("{path} does not take {method}"),
        )
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than {limit} bytes (--max-body)"),
        )
    }

    pub fn unsupported_encoding(encoding: &str) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!(
                "Content-Encoding {encoding:?} is not supported: send the body plain or as zstd"
            ),
        )
    }

    pub fn timeout(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("Timed out reading {what}"),
        )
    }

    pub fn busy(retry_after: u64, waiting: usize) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!(
                "The server is busy: every slot is decoding and {waiting} requests are waiting \
                 (the queue is full); retry after {retry_after} s"
            ),
        )
        .with_code("rate_limit_exceeded");
        e.retry_after = Some(retry_after);
        e
    }

    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The server is shutting down",
        )
        .with_code("server_shutting_down")
    }

    pub fn engine(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error object, as the body of a response or an SSE `data:` line.
    pub fn to_json(&self) -> serde_json::Value {
        json!(self.object())
    }

    pub fn object(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.kind.to_string(),
                param: self.param.clone(),
                code: self.code.map(str::to_string),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.to_json().to_string();
        let mut r = (self.status, body).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
