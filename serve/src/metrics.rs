//! `/metrics` in Prometheus' text format: the HTTP side's counters and latency histograms
//! (kept here), and the engine's counters and gauges (read from its snapshot at scrape time).

use pocket::serving::{Snapshot, BATCH_BUCKETS};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Latency buckets, seconds.
const LATENCY: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 300.0,
];

/// A histogram with fixed buckets (cumulative at render time).
pub struct Histogram {
    counts: Vec<AtomicU64>,
    /// Sum in microseconds (an integer, so it can be atomic).
    sum_us: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: (0..=LATENCY.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        let i = LATENCY
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(LATENCY.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c.load(Ordering::Relaxed);
            let le = LATENCY.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {acc}");
        }
        let _ = writeln!(
            out,
            "{name}_sum {}\n{name}_count {acc}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
    }
}

/// The HTTP side's figures.
pub struct Metrics {
    /// (endpoint, status) → count.
    requests: Mutex<Vec<(String, u16, u64)>>,
    pub time_to_first_token: Histogram,
    pub request_duration: Histogram,
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub client_disconnects: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::new(Vec::new()),
            time_to_first_token: Histogram::new(),
            request_duration: Histogram::new(),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            client_disconnects: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub fn count(&self, endpoint: &str, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        match r.iter_mut().find(|(e, s, _)| e == endpoint && *s == status) {
            Some(entry) => entry.2 += 1,
            None => r.push((endpoint.to_string(), status, 1)),
        }
    }

    pub fn render(&self, s: &Snapshot) -> String {
        let mut out = String::new();
        let mut one = |name: &str, kind: &str, help: &str, v: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        one(
            "pocket_slots",
            "gauge",
            "Decoding slots (--parallel).",
            s.slots.to_string(),
        );
        one(
            "pocket_slots_active",
            "gauge",
            "Slots decoding a request now.",
            s.active.to_string(),
        );
        one(
            "pocket_queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            s.waiting.to_string(),
        );
        one(
            "pocket_queue_capacity",
            "gauge",
            "Requests that may wait (--queue); more get 429.",
            s.queue_capacity.to_string(),
        );
        one(
            "pocket_context_positions",
            "gauge",
            "KV positions each slot holds (--ctx).",
            s.context.to_string(),
        );
        one(
            "pocket_kv_cache_bytes",
            "gauge",
            "Bytes the slots' KV caches hold now.",
            s.kv_bytes.to_string(),
        );
        one(
            "pocket_kv_cache_budget_bytes",
            "gauge",
            "Bytes the slots' KV caches hold when all are full (--parallel x --ctx).",
            s.kv_budget_bytes.to_string(),
        );
        one(
            "pocket_requests_admitted_total",
            "counter",
            "Requests that took a slot.",
            s.admitted.to_string(),
        );
        one(
            "pocket_requests_finished_total",
            "counter",
            "Requests whose answer ended.",
            s.finished.to_string(),
        );
        one(
            "pocket_requests_cancelled_total",
            "counter",
            "Requests dropped because the client went away.",
            s.cancelled.to_string(),
        );
        one(
            "pocket_requests_failed_total",
            "counter",
            "Requests the engine failed or cut at shutdown.",
            s.failed.to_string(),
        );
        one(
            "pocket_requests_rejected_total",
            "counter",
            "Requests refused with 429 (queue full).",
            s.refused.to_string(),
        );
        one(
            "pocket_prompt_tokens_total",
            "counter",
            "Prompt tokens of admitted requests.",
            s.prompt_tokens.to_string(),
        );
        one(
            "pocket_prompt_tokens_cached_total",
            "counter",
            "Prompt tokens found in a slot's KV cache or the prompt cache (prefix reuse).",
            s.cached_tokens.to_string(),
        );
        let ratio = if s.prompt_tokens == 0 {
            0.0
        } else {
            s.cached_tokens as f64 / s.prompt_tokens as f64
        };
        one(
            "pocket_prefix_cache_hit_ratio",
            "gauge",
            "Cached prompt tokens / prompt tokens since start.",
            format!("{ratio:.6}"),
        );
        one(
            "pocket_prefix_cache_hits_total",
            "counter",
            "Requests that reused a cached prefix.",
            s.jobs_with_reuse.to_string(),
        );
        one(
            "pocket_prompt_cache_hits_total",
            "counter",
            "Requests whose prefix was copied from the prompt cache (no free slot held it).",
            s.prompt_cache_hits.to_string(),
        );
        one(
            "pocket_prompt_cache_entries",
            "gauge",
            "Prompts the prompt cache holds now.",
            s.prompt_cache_entries.to_string(),
        );
        one(
            "pocket_prompt_cache_bytes",
            "gauge",
            "Bytes of keys and values the prompt cache holds now.",
            s.prompt_cache_bytes.to_string(),
        );
        one(
            "pocket_prompt_cache_budget_bytes",
            "gauge",
            "The most bytes the prompt cache may hold (--prompt-cache).",
            s.prompt_cache_budget.to_string(),
        );
        one(
            "pocket_generation_tokens_total",
            "counter",
            "Answer tokens generated.",
            s.generated_tokens.to_string(),
        );
        one(
            "pocket_prefill_chunks_total",
            "counter",
            "Prompt chunks run (up to 256 tokens each).",
            s.prefill_chunks.to_string(),
        );
        one(
            "pocket_engine_prefill_seconds_total",
            "counter",
            "Time the engine spent running prompt chunks.",
            format!("{:.6}", s.prefill_seconds),
        );
        one(
            "pocket_engine_decode_seconds_total",
            "counter",
            "Time the engine spent in decode steps (sampling included).",
            format!("{:.6}", s.decode_seconds),
        );
        one(
            "pocket_decode_steps_total",
            "counter",
            "Batched decode steps.",
            s.decode_steps.to_string(),
        );
        one(
            "pocket_connections_open",
            "gauge",
            "Open HTTP connections.",
            get(&self.connections_open),
        );
        one(
            "pocket_connections_total",
            "counter",
            "HTTP connections accepted.",
            get(&self.connections_total),
        );
        one(
            "pocket_client_disconnects_total",
            "counter",
            "Streams whose client left before the end.",
            get(&self.client_disconnects),
        );
        // The batch-size histogram: decode steps by rows.
        let name = "pocket_batch_size";
        let _ = writeln!(
            out,
            "# HELP {name} Rows per decode step.\n# TYPE {name} histogram"
        );
        let mut acc = 0;
        for (i, c) in s.batch_sizes.iter().enumerate() {
            acc += c;
            let le = BATCH_BUCKETS
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {acc}");
        }
        let _ = writeln!(
            out,
            "{name}_sum {}\n{name}_count {}",
            s.decode_rows, s.decode_steps
        );
        let name = "pocket_http_requests_total";
        let _ = writeln!(
            out,
            "# HELP {name} HTTP requests by endpoint and status.\n# TYPE {name} counter"
        );
        for (e, st, n) in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(out, "{name}{{endpoint=\"{e}\",status=\"{st}\"}} {n}");
        }
        self.time_to_first_token.render(
            &mut out,
            "pocket_time_to_first_token_seconds",
            "From the request's arrival to its first answer token.",
        );
        self.request_duration.render(
            &mut out,
            "pocket_request_duration_seconds",
            "From the request's arrival to its answer's end.",
        );
        out
    }
}
