//! The routes, the API key check, and the small endpoints (`/v1/models`, `/health`,
//! `/metrics`, `/openapi.json`). Unknown paths and methods answer with OpenAI's error object.

use crate::app::App;
use crate::error::ApiError;
use crate::handlers::{self, json_response};
use crate::objects::{Health, LoraAdapter, ModelList, ModelObject, SystemOneModel};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/systemone", post(crate::decide::systemone))
        .route("/lora-adapters", get(lora_list).post(lora_set))
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

fn model_object(app: &App) -> ModelObject {
    ModelObject {
        id: app.model_id.clone(),
        object: "model".into(),
        created: app.created,
        owned_by: "pocket".into(),
    }
}

async fn models(State(app): State<Arc<App>>) -> Response {
    app.metrics.count("models", 200);
    // OpenAI's list and System One's in one object: clients of both read their own key.
    json_response(&ModelList {
        object: "list".into(),
        data: vec![model_object(&app)],
        models: vec![SystemOneModel {
            name: app.model_id.clone(),
            description: format!(
                "{} served by pocket: chat and completions, and System One decisions \
                 ({} readout) at /v1/systemone",
                app.model_id,
                app.decide
                    .style
                    .or(app.decide.head.as_ref().map(|h| h.style))
                    .unwrap_or(pocket::decide::DEFAULT_STYLE)
                    .name()
            ),
            release_date: date_of(app.created),
        }],
    })
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

/// `GET /lora-adapters`: llama.cpp's list (`id`, `path`, `scale`), with each adapter's name.
async fn lora_list(State(app): State<Arc<App>>) -> Response {
    app.metrics.count("lora-adapters", 200);
    json_response(&lora_json(&app))
}

fn lora_json(app: &App) -> Vec<LoraAdapter> {
    let list = app.lora.lock().unwrap_or_else(|e| e.into_inner());
    list.iter()
        .enumerate()
        .map(|(i, (a, s))| LoraAdapter {
            id: i,
            name: a.name.clone(),
            path: a.path.display().to_string(),
            scale: *s,
        })
        .collect()
}

/// `POST /lora-adapters` `[{"id", "scale"}]`: the scales requests without `lora` run with
/// (adapters left out go to 0, as llama.cpp's); answers with the new list.
async fn lora_set(State(app): State<Arc<App>>, req: Request) -> Response {
    let bytes = match crate::handlers::read_body(&app, req).await {
        Ok(b) => b,
        Err(e) => {
            app.metrics.count("lora-adapters", e.status.as_u16());
            return e.into_response();
        }
    };
    let parsed = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| ApiError::body(format!("The request body is not valid JSON: {e}")))
        .and_then(|v| crate::request::lora_body(&v))
        .and_then(|list| app.adapters_for(Some(&list)).map(|_| list));
    match parsed {
        Ok(list) => {
            let mut cur = app.lora.lock().unwrap_or_else(|e| e.into_inner());
            let names: Vec<String> = cur.iter().map(|(a, _)| a.name.clone()).collect();
            for (_, s) in cur.iter_mut() {
                *s = 0.0;
            }
            for (r, scale) in list {
                let at = match r {
                    crate::request::LoraRef::Id(n) => n,
                    crate::request::LoraRef::Name(n) => {
                        names.iter().position(|x| *x == n).unwrap_or(usize::MAX)
                    }
                };
                if let Some(e) = cur.get_mut(at) {
                    e.1 = scale;
                }
            }
            drop(cur);
            app.metrics.count("lora-adapters", 200);
            json_response(&lora_json(&app))
        }
        Err(e) => {
            app.metrics.count("lora-adapters", e.status.as_u16());
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
        let body = serde_json::to_string(&Health {
            status: status.into(),
            slots: None,
            slots_active: None,
            queue_depth: None,
        })
        .unwrap_or_default();
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    let s = app.engine.snapshot();
    json_response(&Health {
        status: "ok".into(),
        slots: Some(s.slots),
        slots_active: Some(s.active),
        queue_depth: Some(s.waiting),
    })
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

/// The document (generated: openapi.rs), with the served model's name as the one `model`.
async fn openapi(State(app): State<Arc<App>>) -> Response {
    json_response(&crate::openapi::document(&app.model_id))
}

async fn not_found(State(app): State<Arc<App>>, req: Request) -> Response {
    app.metrics.count("unknown", 404);
    ApiError::not_found(req.uri().path()).into_response()
}

async fn method_not_allowed(State(app): State<Arc<App>>, method: Method, req: Request) -> Response {
    app.metrics.count("unknown", 405);
    ApiError::method_not_allowed(method.as_str(), req.uri().path()).into_response()
}

/// `YYYY-MM-DD` of a Unix time (UTC): the served model's `release_date`, its start day.
fn date_of(secs: u64) -> String {
    // Howard Hinnant's days-to-civil.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_civil() {
        assert_eq!(super::date_of(0), "1970-01-01");
        assert_eq!(super::date_of(1_796_428_800), "2026-12-05");
        assert_eq!(super::date_of(951_782_400), "2000-02-29");
    }
}
