//! `POST /v1/systemone`: System One decisions (docs/decisions.md). The body (plain, or
//! `Content-Encoding: zstd` as the TypeSafe SDK sends bodies over 1 KB) is checked as the
//! API's schema checks it: every problem comes back at once as a 422 `HTTPValidationError`
//! (`{"detail": [{"loc", "msg", "type"}]}`). The prompts are rendered off the async threads,
//! and the decision runs in the engine's continuous batch beside chat answers: its shared
//! tokens as a prompt chunk (reusing cached prefixes), its questions read in one pass with
//! every other decision ready at that step.
//!
//! The request's `model` is not checked (llama.cpp's server ignores it too, and the SDK sends
//! its own default name); the answer names the served model.

use crate::app::{App, Record};
use crate::error::ApiError;
use crate::handlers::{json_response, read_body, ChannelSink};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pocket::decide::{Decider, Invalid, Loc, Plan, Request as Decision};
use pocket::sampler::SamplerConfig;
use pocket::serving::{Event, Failure, Job, Refused};
use serde_json::{json, Value};
use std::io::Read;
use std::sync::Arc;
use tokio::sync::mpsc::unbounded_channel;

/// A 422 with the API's validation detail.
fn unprocessable(rec: &mut Record, errors: &[Invalid]) -> Response {
    rec.status = 422;
    rec.error = errors.first().map(Invalid::line);
    rec.ended = true;
    let body = json!({"detail": errors}).to_string();
    let mut r = (StatusCode::UNPROCESSABLE_ENTITY, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn refuse(rec: &mut Record, e: ApiError) -> Response {
    rec.failed(&e);
    e.into_response()
}

/// The body's bytes, decompressed when it says `Content-Encoding: zstd` (the result held to
/// `--max-body` too: a small body must not inflate into gigabytes).
fn decode(encoding: Option<&str>, bytes: Bytes, limit: usize) -> Result<Bytes, ApiError> {
    match encoding.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
        None | Some("identity") | Some("") => Ok(bytes),
        Some("zstd") => {
            let mut out = Vec::new();
            let dec = ruzstd::decoding::StreamingDecoder::new(&bytes[..]).map_err(|e| {
                ApiError::body(format!("the zstd request body does not decode: {e}"))
            })?;
            dec.take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    ApiError::body(format!("the zstd request body does not decode: {e}"))
                })?;
            if out.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            Ok(Bytes::from(out))
        }
        Some(other) => Err(ApiError::unsupported_encoding(other)),
    }
}

pub async fn systemone(State(app): State<Arc<App>>, req: Request) -> Response {
    let mut rec = Record::new(app.clone(), app.request_id("so"), "systemone");
    let encoding = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = match read_body(&app, req).await {
        Ok(b) => b,
        Err(e) => return refuse(&mut rec, e),
    };
    let bytes = match decode(encoding.as_deref(), bytes, app.max_body) {
        Ok(b) => b,
        Err(e) => return refuse(&mut rec, e),
    };
    let body: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return refuse(
                &mut rec,
                ApiError::body(format!("The request body is not valid JSON: {e}")),
            )
        }
    };
    let a = app.clone();
    let prepared = tokio::task::spawn_blocking(move || -> Result<(Decision, Plan), Prep> {
        let decider = Decider::new(&a.model, a.decide.clone()).map_err(Prep::Engine)?;
        let req = decider.parse(&body).map_err(Prep::Invalid)?;
        let plan = decider
            .plan(&req, a.engine.capacity().context)
            .map_err(|e| {
                Prep::Invalid(vec![Invalid {
                    loc: vec![Loc::Key("body".into()), Loc::Key("state".into())],
                    msg: e.to_string(),
                    kind: "value_error".into(),
                    input: None,
                }])
            })?;
        Ok((req, plan))
    })
    .await;
    let (decision, plan) = match prepared {
        Ok(Ok(p)) => p,
        Ok(Err(Prep::Invalid(errors))) => return unprocessable(&mut rec, &errors),
        Ok(Err(Prep::Engine(e))) => return refuse(&mut rec, ApiError::engine(e.to_string())),
        Err(e) => {
            return refuse(
                &mut rec,
                ApiError::engine(format!("preparing the request failed: {e}")),
            )
        }
    };
    rec.prompt_tokens = plan.input_tokens();
    let (tx, mut rx) = unbounded_channel();
    let job = Job {
        prompt: Vec::new(),
        sampler: SamplerConfig::default(),
        logit_bias: Vec::new(),
        stop: Vec::new(),
        max_tokens: 1,
        guide: None,
        logprobs: None,
        decision: Some(pocket::serving::Decision {
            plan: plan.clone(),
            head: app.decide.head.clone(),
        }),
        lora: match app.adapters_for(None) {
            Ok(l) => l,
            Err(e) => return refuse(&mut rec, e),
        },
        sink: Box::new(ChannelSink(tx)),
    };
    if let Err((refused, _)) = app.engine.submit(job) {
        let e = match refused {
            Refused::Busy { waiting } => ApiError::busy(app.retry_after(waiting), waiting),
            Refused::ShuttingDown => ApiError::shutting_down(),
        };
        return refuse(&mut rec, e);
    }
    let decided = loop {
        match rx.recv().await {
            Some(Event::Started { cached, .. }) => rec.cached_tokens = cached,
            Some(Event::Decided(d)) => break d,
            Some(Event::Failed(Failure::ShuttingDown)) => {
                return refuse(&mut rec, ApiError::shutting_down())
            }
            Some(Event::Failed(Failure::Engine(m))) => {
                return refuse(&mut rec, ApiError::engine(m))
            }
            Some(_) => {}
            None => {
                return refuse(
                    &mut rec,
                    ApiError::engine("the engine stopped before the decision"),
                )
            }
        }
    };
    let decider = match Decider::new(&app.model, app.decide.clone()) {
        Ok(d) => d,
        Err(e) => return refuse(&mut rec, ApiError::engine(e.to_string())),
    };
    let resp = decider.response(&app.model_id, &decision, &plan, &decided.scores);
    rec.cached_tokens = decided.cached_tokens;
    rec.finish = Some("decided".into());
    rec.ended = true;
    json_response(&resp)
}

enum Prep {
    Invalid(Vec<Invalid>),
    Engine(pocket::Error),
}
