//! The routes, the API key check, and the small endpoints (`/v1/models`, `/health`,
//! `/metrics`, `/openapi.json`). Unknown paths and methods answer with OpenAI's error object.

use crate::app::App;
use crate::error::ApiError;
use crate::handlers::{self, json_response};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The OpenAPI 3.1 description of this server (schemathesis fuzzes against it).
pub const OPENAPI: &str = include_str!("openapi.json");

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .with_state(app)
}

/// With `--api-key`, every endpoint but `/health` wants `Authorization: Bearer KEY`.
async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if req.uri().path() != "/health" {
        let h = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if !app.authorized(h) {
            app.metrics.count("auth", 401);
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

fn model_object(app: &App) -> serde_json::Value {
    json!({"id": app.model_id, "object": "model", "created": app.created, "owned_by": "pocket"})
}

async fn models(State(app): State<Arc<App>>) -> Response {
    app.metrics.count("models", 200);
    json_response(&json!({"object": "list", "data": [model_object(&app)]}))
}

async fn model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match app.check_model(&id) {
        Ok(()) => {
            app.metrics.count("models", 200);
            json_response(&model_object(&app))
        }
        Err(e) => {
            app.metrics.count("models", 404);
            e.into_response()
        }
    }
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let down = if app.stopping.load(Ordering::SeqCst) {
        Some("shutting_down")
    } else if !app.engine.alive() {
        Some("engine_stopped")
    } else {
        None
    };
    if let Some(status) = down {
        let body = json!({"status": status}).to_string();
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    let s = app.engine.snapshot();
    json_response(
        &json!({"status": "ok", "slots": s.slots, "slots_active": s.active,
                          "queue_depth": s.waiting}),
    )
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let body = app.metrics.render(&app.engine.snapshot());
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// The document, with the served model's name as the one `model` value.
async fn openapi(State(app): State<Arc<App>>) -> Response {
    let id = serde_json::to_string(&app.model_id).unwrap_or_default();
    let doc = OPENAPI.replace("\"__MODEL_ID__\"", &id);
    let mut r = (StatusCode::OK, doc).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn not_found(State(app): State<Arc<App>>, req: Request) -> Response {
    app.metrics.count("unknown", 404);
    ApiError::not_found(req.uri().path()).into_response()
}

async fn method_not_allowed(State(app): State<Arc<App>>, method: Method, req: Request) -> Response {
    app.metrics.count("unknown", 405);
    ApiError::method_not_allowed(method.as_str(), req.uri().path()).into_response()
}
