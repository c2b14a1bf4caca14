//! The server's shared state (model, engine, defaults, metrics), request ids, and the one log
//! line each request writes to stderr when it ends, however it ends.

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::prompt::Defaults;
use pocket::loader::LoadedModel;
use pocket::serving::Engine;
use serde_json::json;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct App {
    pub model: Arc<LoadedModel>,
    pub engine: Engine,
    pub defaults: Defaults,
    /// How `/v1/systemone` asks and reads (readout, order, head).
    pub decide: pocket::decide::Settings,
    /// The LoRA adapters loaded at start (`--lora NAME=PATH`) and their current scales: what a
    /// request without `lora` runs with (`POST /lora-adapters` sets them).
    pub lora: Mutex<Vec<(Arc<pocket::lora::Adapter>, f32)>>,
    /// The name clients send as `model` (and `/v1/models` lists).
    pub model_id: String,
    pub fingerprint: String,
    pub created: u64,
    pub max_body: usize,
    pub read_timeout: Duration,
    /// Compared in constant time; never logged.
    pub api_key: Option<String>,
    pub log_json: bool,
    pub metrics: Arc<Metrics>,
    pub stopping: AtomicBool,
    counter: AtomicU64,
    salt: u64,
    /// Mean seconds per finished request (recent), for a 429's `Retry-After`.
    mean_secs: Mutex<f64>,
}

/// splitmix64: ids and seeds that differ per request and per process.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl App {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: Arc<LoadedModel>,
        engine: Engine,
        defaults: Defaults,
        model_id: String,
        max_body: usize,
        read_timeout: Duration,
        api_key: Option<String>,
        log_json: bool,
    ) -> App {
        let salt = mix(SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ ((std::process::id() as u64) << 32));
        App {
            fingerprint: crate::response::fingerprint(&model),
            model,
            engine,
            defaults,
            decide: pocket::decide::Settings::default(),
            lora: Mutex::new(Vec::new()),
            model_id,
            created: now_secs(),
            max_body,
            read_timeout,
            api_key,
            log_json,
            metrics: Arc::new(Metrics::default()),
            stopping: AtomicBool::new(false),
            counter: AtomicU64::new(0),
            salt,
            mean_secs: Mutex::new(1.0),
        }
    }

    fn next(&self) -> u64 {
        mix(self.salt ^ self.counter.fetch_add(1, Ordering::Relaxed))
    }

    /// `chatcmpl-…` / `cmpl-…`: 24 hex digits.
    pub fn request_id(&self, prefix: &str) -> String {
        format!("{prefix}-{:016x}{:08x}", self.next(), self.next() as u32)
    }

    /// `call_…`: 24 letters and digits, as OpenAI's tool call ids.
    pub fn call_id(&self) -> String {
        const ABC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let (mut a, mut b) = (self.next(), self.next());
        let s: String = (0..24)
            .map(|i| {
                let x = if i < 12 { &mut a } else { &mut b };
                let c = ABC[(*x % 62) as usize] as char;
                *x /= 62;
                c
            })
            .collect();
        format!("call_{s}")
    }

    /// A request without `seed` still gets one (sampling needs one); it differs per request.
    pub fn seed(&self) -> u64 {
        self.next()
    }

    /// The served model's name, or a 404 naming it.
    pub fn check_model(&self, asked: &str) -> Result<(), ApiError> {
        if asked == self.model_id {
            Ok(())
        } else {
            Err(ApiError::model_not_found(asked, &self.model_id))
        }
    }

    /// The adapters a request runs with: the ones it lists at its scales (the others at 0, as
    /// llama.cpp's server does), or the server's current scales. `None`: none at all.
    pub fn adapters_for(
        &self,
        asked: Option<&[(crate::request::LoraRef, f32)]>,
    ) -> Result<Option<Arc<pocket::lora::AdapterSet>>, ApiError> {
        let loaded = self.lora.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let adapters: Vec<(Arc<pocket::lora::Adapter>, f32)> = match asked {
            None => loaded,
            Some(list) => {
                let mut out: Vec<(Arc<pocket::lora::Adapter>, f32)> =
                    loaded.iter().map(|(a, _)| (a.clone(), 0.0)).collect();
                for (i, (r, scale)) in list.iter().enumerate() {
                    let at = match r {
                        crate::request::LoraRef::Id(n) => (*n < out.len()).then_some(*n),
                        crate::request::LoraRef::Name(n) => {
                            out.iter().position(|(a, _)| &a.name == n)
                        }
                    };
                    let Some(at) = at else {
                        return Err(ApiError::invalid(
                            &format!("lora[{i}].id"),
                            format!(
                                "invalid adapter id: this server has {} adapter(s) ({}); see GET /lora-adapters",
                                out.len(),
                                out.iter().map(|(a, _)| a.name.as_str()).collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    };
                    out[at].1 = *scale;
                }
                out
            }
        };
        let set = pocket::lora::AdapterSet { adapters };
        Ok((!set.is_empty()).then(|| Arc::new(set)))
    }

    /// The Authorization header is `Bearer KEY` with the server's key (constant time).
    pub fn authorized(&self, header: Option<&str>) -> bool {
        let Some(key) = &self.api_key else {
            return true;
        };
        let Some(got) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let (a, b) = (got.as_bytes(), key.as_bytes());
        let mut diff = (a.len() ^ b.len()) as u8;
        for i in 0..a.len().max(b.len()) {
            diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }

    /// `Retry-After` for a refused request: the waiting requests' expected time per slot.
    pub fn retry_after(&self, waiting: usize) -> u64 {
        let mean = *self.mean_secs.lock().unwrap_or_else(|e| e.into_inner());
        let slots = self.engine.capacity().slots.max(1) as f64;
        ((waiting as f64 + 1.0) * mean / slots)
            .ceil()
            .clamp(1.0, 600.0) as u64
    }

    fn note_duration(&self, secs: f64) {
        let mut m = self.mean_secs.lock().unwrap_or_else(|e| e.into_inner());
        *m = 0.9 * *m + 0.1 * secs;
    }
}

/// One request's record: written as its log line and counted in the metrics when dropped, so
/// every request (answered, refused, failed, or its client gone mid-stream) logs exactly once.
pub struct Record {
    app: Arc<App>,
    pub id: String,
    pub endpoint: &'static str,
    pub stream: bool,
    pub status: u16,
    start: Instant,
    first_token: Option<Instant>,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub finish: Option<String>,
    pub error: Option<String>,
    /// The answer ended (or failed) as the server meant it to; false when the client left.
    pub ended: bool,
}

impl Record {
    pub fn new(app: Arc<App>, id: String, endpoint: &'static str) -> Record {
        Record {
            app,
            id,
            endpoint,
            stream: false,
            status: 200,
            start: Instant::now(),
            first_token: None,
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            finish: None,
            error: None,
            ended: false,
        }
    }

    pub fn token(&mut self) {
        if self.first_token.is_none() {
            let now = Instant::now();
            self.first_token = Some(now);
            self.app
                .metrics
                .time_to_first_token
                .observe((now - self.start).as_secs_f64());
        }
        self.completion_tokens += 1;
    }

    pub fn failed(&mut self, e: &ApiError) {
        self.status = e.status.as_u16();
        self.error = Some(e.message.clone());
        self.ended = true;
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let total = self.start.elapsed();
        let m = &self.app.metrics;
        m.count(self.endpoint, self.status);
        if !self.ended {
            m.client_disconnects.fetch_add(1, Ordering::Relaxed);
        }
        if self.status == 200 && self.ended {
            m.request_duration.observe(total.as_secs_f64());
            self.app.note_duration(total.as_secs_f64());
        }
        let ttft = self
            .first_token
            .map(|t| (t - self.start).as_secs_f64() * 1e3);
        let outcome = match (&self.error, &self.finish, self.ended) {
            (Some(e), _, _) => e.clone(),
            (None, Some(f), _) => f.clone(),
            (None, None, false) => "client disconnected".into(),
            (None, None, true) => "ok".into(),
        };
        let line = if self.app.log_json {
            json!({
                "id": self.id, "endpoint": self.endpoint, "status": self.status,
                "stream": self.stream, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens,
                "completion_tokens": self.completion_tokens,
                "ttft_ms": ttft, "total_ms": total.as_secs_f64() * 1e3,
                "outcome": outcome,
            })
            .to_string()
        } else {
            format!(
                "{} {} {}{} prompt {} (cached {}) completion {} ttft {} total {:.0} ms: {}",
                self.id,
                self.endpoint,
                self.status,
                if self.stream { " stream" } else { "" },
                self.prompt_tokens,
                self.cached_tokens,
                self.completion_tokens,
                ttft.map_or("-".into(), |t| format!("{t:.0} ms")),
                total.as_secs_f64() * 1e3,
                outcome
            )
        };
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}
