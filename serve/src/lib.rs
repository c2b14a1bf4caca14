//! `pocket serve`: an OpenAI-compatible HTTP server over pocket's serving engine
//! (`pocket::serving`, continuous batching with prefix reuse). docs/serve.md is the guide.
//!
//! - error.rs: OpenAI's error object and statuses;
//! - wire.rs: the request bodies as serde types (a wrong type is a 400 naming the field);
//!   request.rs: their ranges and the rules between fields;
//! - objects.rs: the response bodies as types; openapi.rs: `/openapi.json`, generated from
//!   wire.rs and objects.rs (utoipa), with System One's part (systemone.openapi.json);
//! - prompt.rs: a request made into prompt ids, sampling and a constraint for the engine;
//! - response.rs: response objects, chunks, logprobs, tool calls;
//! - handlers.rs: the two generation endpoints, whole or streamed;
//! - decide.rs: `/v1/systemone`, System One decisions;
//! - routes.rs: the router, the API key, the small endpoints; app.rs: shared state, ids and
//!   the per-request log line; metrics.rs: `/metrics`;
//! - conn.rs: connections (timeouts, a cap, graceful shutdown).

mod app;
mod conn;
mod decide;
mod error;
mod handlers;
mod metrics;
mod objects;
mod openapi;
mod prompt;
mod request;
mod response;
mod routes;
mod wire;

pub use error::ApiError;
pub use openapi::document as openapi_document;

use pocket::loader::LoadedModel;
use pocket::serving::{Capacity, Engine};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Engine(#[from] pocket::Error),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// The server's settings (the CLI's flags).
#[derive(Clone, Debug)]
pub struct Options {
    pub host: String,
    /// 0 picks a free port (printed at start).
    pub port: u16,
    /// The name clients send as `model`.
    pub model_id: String,
    /// Requests decoded at once.
    pub parallel: usize,
    /// Requests that may wait for a slot before new ones get 429.
    pub queue: usize,
    /// KV positions per slot.
    pub context: usize,
    /// Bytes of prompts' keys and values kept for later requests that start alike (0: none).
    pub prompt_cache: usize,
    pub max_tokens_limit: usize,
    /// The budget of a request that sets no `max_tokens` (≤ `max_tokens_limit`).
    pub max_tokens_default: usize,
    pub max_body: usize,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    /// After SIGINT/SIGTERM, how long running answers may take to finish before they are cut.
    pub shutdown_timeout: Duration,
    pub max_connections: usize,
    pub api_key: Option<String>,
    pub log_json: bool,
    /// A pause after each decode step (tests; zero otherwise).
    pub step_delay: Duration,
    /// How `/v1/systemone` asks and reads its questions.
    pub decide: pocket::decide::Settings,
    /// LoRA adapters requests may choose (`"lora": [{"id", "scale"}]`), at their default scales.
    pub lora: Vec<(Arc<pocket::lora::Adapter>, f32)>,
}

/// Serves `model` until SIGINT or SIGTERM, then shuts down gracefully: no new connections or
/// requests (waiting ones get 503), running answers finish within `shutdown_timeout` and are
/// cut after it (a stream then ends with an error event and `[DONE]`).
pub fn run(model: Arc<LoadedModel>, opts: Options) -> Result<(), ServeError> {
    // Build the grammar engine's vocabulary now, not on the first structured request.
    let _ = model.grammars();
    let engine = Engine::start(
        model.clone(),
        Capacity {
            slots: opts.parallel,
            context: opts.context,
            queue: opts.queue,
            prompt_cache: opts.prompt_cache,
        },
    )?;
    engine.set_step_delay(opts.step_delay);
    let defaults = prompt::Defaults::for_model(
        &model,
        opts.max_tokens_limit,
        opts.max_tokens_default,
        opts.context,
    );
    let mut app = app::App::new(
        model,
        engine,
        defaults,
        opts.model_id.clone(),
        opts.max_body,
        opts.read_timeout,
        opts.api_key.clone(),
        opts.log_json,
    );
    app.decide = opts.decide.clone();
    *app.lora.lock().unwrap_or_else(|e| e.into_inner()) = opts.lora.clone();
    let app = Arc::new(app);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Requests are prepared (templates, grammars) on the blocking pool: a few threads keep
        // the allocator from spreading over many arenas (RSS grew by tens of MB with the
        // default 512 under the fault run).
        .max_blocking_threads(4)
        .thread_name("pocket-http")
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(serve(app, opts))
}

async fn serve(app: Arc<app::App>, opts: Options) -> Result<(), ServeError> {
    let addr = format!("{}:{}", opts.host, opts.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local: SocketAddr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: addr.clone(),
        source,
    })?;
    let cap = app.engine.capacity();
    eprintln!(
        "pocket serve: {} as '{}' on http://{local} ({} slots of {} positions, queue {}{})",
        app.model.path.display(),
        app.model_id,
        cap.slots,
        cap.context,
        cap.queue,
        if opts.api_key.is_some() {
            ", API key required"
        } else {
            ""
        }
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let limits = conn::Limits {
        read_timeout: opts.read_timeout,
        write_timeout: opts.write_timeout,
        max_connections: opts.max_connections,
    };
    let accept = tokio::spawn(conn::accept_loop(
        listener,
        routes::router(app.clone()),
        limits,
        app.metrics.clone(),
        stop_rx,
    ));
    signal().await;
    eprintln!(
        "pocket serve: stopping (running answers get {} s to finish)",
        opts.shutdown_timeout.as_secs_f64()
    );
    app.stopping.store(true, Ordering::SeqCst);
    app.engine.shutdown(false);
    let _ = stop_tx.send(true);
    let graceful = match accept.await {
        Ok(g) => g,
        Err(_) => return Ok(()),
    };
    let all_closed = graceful.shutdown();
    tokio::pin!(all_closed);
    let wait_engine = |app: Arc<app::App>| async move {
        while app.engine.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let finished = tokio::time::timeout(opts.shutdown_timeout, wait_engine(app.clone())).await;
    if finished.is_err() {
        eprintln!("pocket serve: the deadline passed; cutting the answers still running");
        app.engine.shutdown(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), wait_engine(app.clone())).await;
    }
    // Streams write their last chunks, then their connections close.
    let _ = tokio::time::timeout(Duration::from_secs(5), &mut all_closed).await;
    let a = app.clone();
    let _ = tokio::task::spawn_blocking(move || a.engine.join()).await;
    eprintln!("pocket serve: stopped");
    Ok(())
}

/// SIGINT or SIGTERM (Ctrl-C elsewhere).
async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
