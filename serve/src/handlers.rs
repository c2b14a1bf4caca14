//! `POST /v1/chat/completions` and `POST /v1/completions`: read and check the body, prepare
//! the prompt and constraint (off the async threads: templates and grammars take
//! milliseconds), submit the job, then answer as one JSON object or as server-sent events.
//!
//! A streamed answer's events become chunks as they arrive; when the client goes away the
//! response body is dropped, which drops the job's receiver, and the engine frees the slot at
//! its next step.

use crate::app::{now_secs, App, Record};
use crate::error::ApiError;
use crate::prompt::{self, Prepared};
use crate::request::{self, parse_body};
use crate::response::{self, CallFilter, Endpoint, Head};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use pocket::serving::{Event, Failure, Finished, Job, Refused, Sink, TokenLogprob};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// The engine's events for one request, into a channel the handler reads.
pub(crate) struct ChannelSink(pub(crate) UnboundedSender<Event>);

impl Sink for ChannelSink {
    fn send(&mut self, event: Event) {
        let _ = self.0.send(event);
    }
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

pub async fn chat(State(app): State<Arc<App>>, req: Request) -> Response {
    generate(app, Endpoint::Chat, req).await
}

pub async fn completions(State(app): State<Arc<App>>, req: Request) -> Response {
    generate(app, Endpoint::Completion, req).await
}

/// The body, within `--max-body` bytes (413) and `--read-timeout` (408).
///
/// A body over the limit is read on and thrown away (up to [`DRAIN_LIMIT`] bytes, within the
/// read timeout) before the 413 goes out: a client still sending when the server closes would
/// get a reset instead of the answer.
pub async fn read_body(app: &App, req: Request) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = req.into_body();
    let deadline = tokio::time::Instant::now() + app.read_timeout;
    if declared.is_some_and(|n| n > app.max_body as u64) {
        if declared.is_some_and(|n| n <= DRAIN_LIMIT) {
            drain(&mut body, deadline).await;
        }
        return Err(ApiError::too_large(app.max_body));
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0) as usize);
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(ApiError::timeout("the request body")),
            Ok(None) => return Ok(Bytes::from(buf)),
            Ok(Some(Err(e))) => {
                return Err(ApiError::body(format!(
                    "reading the request body failed: {e}"
                )))
            }
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > app.max_body {
                drain(&mut body, deadline).await;
                return Err(ApiError::too_large(app.max_body));
            }
            buf.extend_from_slice(&data);
        }
    }
}

/// Bodies up to this size are read and discarded before a 413 (see [`read_body`]).
const DRAIN_LIMIT: u64 = 64 << 20;

/// Reads and drops what is left of `body` (at most [`DRAIN_LIMIT`] bytes, until `deadline`).
async fn drain(body: &mut Body, deadline: tokio::time::Instant) {
    let mut seen = 0u64;
    while seen <= DRAIN_LIMIT {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => seen += f.data_ref().map_or(0, |d| d.len() as u64),
            _ => return,
        }
    }
}

struct Ready {
    prepared: Prepared,
    lora: Option<Arc<pocket::lora::AdapterSet>>,
    stream: bool,
    include_usage: bool,
}

/// Body → checked request → prompt ids and constraint.
async fn prepare(app: &Arc<App>, endpoint: Endpoint, req: Request) -> Result<Ready, ApiError> {
    let bytes = read_body(app, req).await?;
    let body = parse_body(&bytes)?;
    let seed = app.seed();
    let a = app.clone();
    let work = move || -> Result<Ready, ApiError> {
        let (common, prepared) = match endpoint {
            Endpoint::Chat => {
                let r = request::chat(&body)?;
                a.check_model(&r.common.model)?;
                let p = prompt::chat(&a.model, &a.defaults, &r, seed)?;
                (r.common, p)
            }
            Endpoint::Completion => {
                let r = request::completion(&body)?;
                a.check_model(&r.common.model)?;
                let p = prompt::completion(&a.model, &a.defaults, &r, seed)?;
                (r.common, p)
            }
        };
        Ok(Ready {
            lora: a.adapters_for(common.lora.as_deref())?,
            prepared,
            stream: common.stream,
            include_usage: common.include_usage,
        })
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(r) => r,
        Err(e) => Err(ApiError::engine(format!(
            "preparing the request failed: {e}"
        ))),
    }
}

async fn generate(app: Arc<App>, endpoint: Endpoint, req: Request) -> Response {
    let (prefix, name) = match endpoint {
        Endpoint::Chat => ("chatcmpl", "chat"),
        Endpoint::Completion => ("cmpl", "completions"),
    };
    let mut rec = Record::new(app.clone(), app.request_id(prefix), name);
    let ready = match prepare(&app, endpoint, req).await {
        Ok(r) => r,
        Err(e) => {
            rec.failed(&e);
            return e.into_response();
        }
    };
    rec.stream = ready.stream;
    rec.prompt_tokens = ready.prepared.prompt.len();
    let p = ready.prepared;
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: p.prompt,
        sampler: p.settings.sampler,
        logit_bias: p.settings.logit_bias,
        stop: p.stop,
        max_tokens: p.settings.max_tokens,
        guide: p.guide,
        logprobs: p.logprobs,
        decision: None,
        lora: ready.lora.clone(),
        sink: Box::new(ChannelSink(tx)),
    };
    if let Err((refused, _)) = app.engine.submit(job) {
        let e = match refused {
            Refused::Busy { waiting } => ApiError::busy(app.retry_after(waiting), waiting),
            Refused::ShuttingDown => ApiError::shutting_down(),
        };
        rec.failed(&e);
        return e.into_response();
    }
    let answer = Answer {
        head: Head {
            id: rec.id.clone(),
            created: now_secs(),
            model: app.model_id.clone(),
            endpoint,
        },
        app: app.clone(),
        tool_names: p.tool_names,
        echo: p.echo,
        include_usage: ready.include_usage,
        rec,
    };
    if ready.stream {
        answer.stream(rx).await
    } else {
        answer.whole(rx).await
    }
}

/// One answer on its way out.
struct Answer {
    app: Arc<App>,
    head: Head,
    tool_names: Vec<String>,
    echo: Option<String>,
    include_usage: bool,
    rec: Record,
}

/// The error for an answer that failed, or whose events stopped (the engine gone).
fn failure(f: Option<Failure>) -> ApiError {
    match f {
        Some(Failure::ShuttingDown) => ApiError::shutting_down(),
        Some(Failure::Engine(m)) => ApiError::engine(m),
        None => ApiError::engine("the engine stopped before the answer ended"),
    }
}

impl Answer {
    /// An error status instead of the answer.
    fn refuse(mut self, f: Option<Failure>) -> Response {
        let e = failure(f);
        self.rec.failed(&e);
        e.into_response()
    }

    fn ended(&mut self, f: &Finished, called: bool) {
        self.rec.cached_tokens = f.cached_tokens;
        self.rec.finish = Some(response::finish_reason(f, called).as_str().to_string());
        self.rec.ended = true;
    }

    /// The whole answer as one `chat.completion` / `text_completion`.
    async fn whole(mut self, mut rx: UnboundedReceiver<Event>) -> Response {
        let mut lps: Vec<(u32, TokenLogprob)> = Vec::new();
        let f = loop {
            match rx.recv().await {
                Some(Event::Started { cached, .. }) => self.rec.cached_tokens = cached,
                Some(Event::Token { id, logprob, .. }) => {
                    self.rec.token();
                    if let Some(lp) = logprob {
                        lps.push((id, lp));
                    }
                }
                Some(Event::Done(f)) => break f,
                Some(Event::Failed(fl)) => return self.refuse(Some(fl)),
                Some(Event::Decided(_)) => return self.refuse(None),
                None => return self.refuse(None),
            }
        };
        let app = self.app.clone();
        let calls = response::split_calls(&f.text, &self.tool_names, &mut || app.call_id());
        self.ended(&f, !calls.calls.is_empty());
        let m = &self.app.model;
        let fp = &self.app.fingerprint;
        match self.head.endpoint {
            Endpoint::Chat => {
                let lp = (!lps.is_empty()).then(|| {
                    lps.iter()
                        .map(|(id, lp)| response::chat_logprob(m, *id, lp))
                        .collect()
                });
                let body = response::whole_chat(&self.head, fp, &f, calls.content, calls.calls, lp);
                json_response(&body)
            }
            Endpoint::Completion => {
                let echo = self.echo.clone().unwrap_or_default();
                let lp =
                    (!lps.is_empty()).then(|| response::completion_logprobs(m, &lps, echo.len()));
                let text = format!("{echo}{}", f.text);
                json_response(&response::whole_text(&self.head, fp, &f, text, lp))
            }
        }
    }

    /// Server-sent events, one chunk per piece of text, ending with `data: [DONE]`. The
    /// response starts once the request has a slot: one that fails while it waits (the server
    /// stopping) gets a plain error status instead of a stream.
    async fn stream(self, mut rx: UnboundedReceiver<Event>) -> Response {
        let first = match rx.recv().await {
            Some(Event::Failed(fl)) => return self.refuse(Some(fl)),
            None => return self.refuse(None),
            first => first,
        };
        let filter = (!self.tool_names.is_empty()).then(CallFilter::default);
        let mut state = Streaming {
            rx,
            out: VecDeque::new(),
            done: false,
            filter,
            offset: 0,
            answer: self,
        };
        state.on_event(first);
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            loop {
                if let Some(frame) = s.out.pop_front() {
                    return Some((Ok::<Bytes, std::convert::Infallible>(frame), s));
                }
                if s.done {
                    return None;
                }
                let ev = s.rx.recv().await;
                s.on_event(ev);
            }
        });
        let mut r = Response::new(Body::from_stream(stream));
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        r
    }
}

struct Streaming {
    rx: UnboundedReceiver<Event>,
    out: VecDeque<Bytes>,
    done: bool,
    filter: Option<CallFilter>,
    /// Bytes of completion text sent so far (the legacy logprobs' `text_offset`).
    offset: usize,
    answer: Answer,
}

fn frame(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

impl Streaming {
    fn chunk(&mut self, delta: Value, logprobs: Option<Value>, finish: Option<&str>) {
        let a = &self.answer;
        let c = response::chunk(
            &a.head,
            &a.app.fingerprint,
            delta,
            logprobs,
            finish,
            a.include_usage,
        );
        self.out.push_back(frame(&c));
    }

    fn text(&mut self, text: &str, logprobs: Option<Value>) {
        if text.is_empty() && logprobs.is_none() {
            return;
        }
        self.offset += text.len();
        self.chunk(json!({"content": text}), logprobs, None);
    }

    fn on_event(&mut self, ev: Option<Event>) {
        let chat = self.answer.head.endpoint == Endpoint::Chat;
        match ev {
            Some(Event::Started { cached, .. }) => {
                self.answer.rec.cached_tokens = cached;
                if chat {
                    self.chunk(json!({"role": "assistant", "content": ""}), None, None);
                } else if let Some(echo) = self.answer.echo.clone() {
                    self.text(&echo, None);
                }
            }
            Some(Event::Token { id, text, logprob }) => {
                self.answer.rec.token();
                let shown = match self.filter.as_mut() {
                    Some(f) => f.push(&text),
                    None => text,
                };
                let m = self.answer.app.model.clone();
                let lp = logprob.map(|lp| match chat {
                    true => json!([response::chat_logprob(&m, id, &lp)]),
                    false => json!(response::completion_logprobs(&m, &[(id, lp)], self.offset)),
                });
                self.text(&shown, lp);
            }
            Some(Event::Done(f)) => self.finish(f),
            Some(Event::Decided(_)) => self.error(failure(None)),
            Some(Event::Failed(fl)) => self.error(failure(Some(fl))),
            None => self.error(failure(None)),
        }
    }

    /// The stream ends with an error event (OpenAI's error object) and `[DONE]`.
    fn error(&mut self, e: ApiError) {
        self.answer.rec.failed(&e);
        self.out.push_back(frame(&e.to_json()));
        self.out.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
        self.done = true;
    }

    fn finish(&mut self, f: Finished) {
        let app = self.answer.app.clone();
        let calls = response::split_calls(&f.text, &self.answer.tool_names, &mut || app.call_id());
        let rest = match self.filter.as_mut() {
            Some(filter) => {
                filter.push(&f.tail);
                filter.finish(&calls.content)
            }
            None => f.tail.clone(),
        };
        self.text(&rest, None);
        if !calls.calls.is_empty() {
            self.chunk(json!({"tool_calls": calls.calls}), None, None);
        }
        self.answer.ended(&f, !calls.calls.is_empty());
        let reason = response::finish_reason(&f, !calls.calls.is_empty());
        self.chunk(json!({}), None, Some(reason.as_str()));
        if self.answer.include_usage {
            let u = response::usage_chunk(&self.answer.head, &self.answer.app.fingerprint, &f);
            self.out.push_back(frame(&u));
        }
        self.out.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
        self.done = true;
    }
}

/// A 200 with `v` as JSON (the response types serialize without fail: string keys only; a
/// failure would be a 500, never a partial body).
pub fn json_response<T: serde::Serialize + ?Sized>(v: &T) -> Response {
    let text = match serde_json::to_string(v) {
        Ok(t) => t,
        Err(e) => {
            return ApiError::engine(format!("the response does not serialize: {e}"))
                .into_response()
        }
    };
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
