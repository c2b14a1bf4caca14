//! `pocket serve` as a client sees it, over real HTTP on a free loopback port, on a tiny
//! random-weight fixture exported to Q4: answers equal `pocket run`'s, streams add up to the
//! whole answer, usage counts what ran, every kind of bad request gets its 4xx and leaves the
//! server healthy, a full queue answers 429, a client that leaves frees its slot, a slow
//! client is cut off, and SIGTERM ends streams cleanly and exits 0. (The official `openai`
//! client, jsonschema, load and fault runs on SmolLM2 are scripts/check-serve.sh.)

use crate::common;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The tiny Qwen2 fixture exported to Q4 once per test process (the int8 kernels, as a user's
/// quantized model runs).
fn model() -> PathBuf {
    static ONCE: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("tiny.pocket");
        let src = common::tiny("qwen2-tiny");
        common::pocket_ok(&[
            "export",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--calib",
            "none",
        ]);
        (dir, out)
    })
    .1
    .clone()
}

/// The fixture's end-of-sequence ids (2 and 0), biased away so random weights write long
/// answers.
fn no_eos() -> Value {
    json!({"2": -100, "0": -100})
}

struct Server {
    child: Child,
    port: u16,
    log: Arc<Mutex<String>>,
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of a server-sent-event stream.
    fn events(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.body)
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
}

/// Reads an HTTP/1.1 response (Content-Length, chunked, or to the end).
fn read_response(r: &mut impl BufRead) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("status line {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Resp {
        status,
        headers,
        body,
    }
}

impl Server {
    fn start(model: &Path, extra: &[&str]) -> Server {
        let mut child = common::pocket_command()
            .args([
                "serve",
                model.to_str().unwrap(),
                "--port",
                "0",
                "--alias",
                "tiny",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pocket serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("on http://") {
                    let rest = &line[at + "on http://".len()..];
                    let port = rest
                        .split(' ')
                        .next()
                        .and_then(|a| a.rsplit(':').next())
                        .and_then(|p| p.parse::<u16>().ok());
                    let _ = tx.send(port);
                }
                let mut g = l.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(60))
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no start-up line: {}", log.lock().unwrap()));
        Server { child, port, log }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        s
    }

    fn raw(&self, request: &[u8]) -> Resp {
        let mut s = self.connect();
        s.write_all(request).unwrap();
        read_response(&mut BufReader::new(s))
    }

    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut all = head.into_bytes();
        all.extend_from_slice(body);
        self.raw(&all)
    }

    fn post(&self, path: &str, body: &Value) -> Resp {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        )
    }

    fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], b"")
    }

    fn metric(&self, name: &str) -> f64 {
        let r = self.get("/metrics");
        let text = String::from_utf8(r.body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits until `metric` reads `want` (the engine frees slots at its next step).
    fn wait_metric(&self, name: &str, want: f64) {
        let t = Instant::now();
        while self.metric(name) != want {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{name} stayed at {} (want {want})",
                self.metric(name)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chat_body(user: &str, extra: Value) -> Value {
    let mut b = json!({
        "model": "tiny",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": user}],
        "temperature": 0,
        "max_tokens": 24,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[test]
fn chat_answers_equal_pocket_run_and_streams_add_up_to_them() {
    let m = model();
    let s = Server::start(&m, &["--parallel", "2"]);
    let run = common::pocket_ok(&[
        "run",
        m.to_str().unwrap(),
        "--system",
        "Be brief.",
        "-p",
        "Hello there",
        "-n",
        "24",
        "--temp",
        "0",
        "--json",
    ]);
    let run: Value = serde_json::from_slice(&run.stdout).unwrap();
    let r = s.post("/v1/chat/completions", &chat_body("Hello there", json!({})));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let answer = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(answer, run["text"], "greedy answers equal pocket run's");
    assert_eq!(v["usage"]["prompt_tokens"], run["prompt_tokens"]);
    assert_eq!(v["usage"]["completion_tokens"], run["generated_tokens"]);
    let reason = match run["finish_reason"].as_str().unwrap() {
        "context" => "length",
        r => r,
    };
    assert_eq!(v["choices"][0]["finish_reason"], reason);

    // The same request streamed: the deltas add up to the answer; usage comes last.
    let body = chat_body(
        "Hello there",
        json!({"stream": true, "stream_options": {"include_usage": true}}),
    );
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"].get(0)?["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(streamed, answer);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], run["generated_tokens"]);
    let finish = &chunks[chunks.len() - 2]["choices"][0];
    assert_eq!(finish["finish_reason"], reason);
    // The second request found the first one's prompt in a slot.
    assert!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(s.metric("pocket_prefix_cache_hit_ratio") > 0.0);
}

#[test]
fn completions_count_what_ran_and_report_logprobs() {
    let s = Server::start(&model(), &[]);
    let ids: Vec<u32> = (3..40).collect();
    let r = s.post(
        "/v1/completions",
        &json!({"model": "tiny", "prompt": ids, "max_tokens": 9, "logprobs": 3,
                "temperature": 0, "logit_bias": no_eos()}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["usage"]["prompt_tokens"], ids.len());
    assert_eq!(v["usage"]["completion_tokens"], 9);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 9);
    for (t, top) in lp["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(lp["top_logprobs"].as_array().unwrap())
    {
        // Greedy: the chosen token is the most likely one (among the biased logits).
        let best = top
            .as_object()
            .unwrap()
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((t.as_f64().unwrap() - best).abs() < 1e-6);
        assert!(t.as_f64().unwrap() <= 0.0);
    }
    // The text is the tokens' spellings put together (with echo, after the prompt).
    let text = v["choices"][0]["text"].as_str().unwrap();
    let joined: String = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(text, joined);
    let r = s.post(
        "/v1/completions",
        &json!({"model": "tiny", "prompt": "Once upon", "max_tokens": 3, "echo": true,
                "temperature": 0}),
    );
    assert!(r.json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Once upon"));
}

#[test]
fn bad_requests_get_openai_errors_and_leave_the_server_healthy() {
    let s = Server::start(&model(), &["--max-body", "65536"]);
    let ok = chat_body("hi", json!({"max_tokens": 2}));
    let mut cases: Vec<(Vec<u8>, u16, Option<&str>)> = vec![
        (b"{not json".to_vec(), 400, None),
        (b"[1, 2]".to_vec(), 400, None),
        (b"\xff\xfe\x00{}".to_vec(), 400, None),
        (b"".to_vec(), 400, None),
    ];
    let mut with = |k: &str, v: Value, status: u16, param: &'static str| {
        let mut b = ok.clone();
        b[k] = v;
        cases.push((b.to_string().into_bytes(), status, Some(param)));
    };
    with("model", json!("gpt-4o"), 404, "model");
    with("model", json!(7), 400, "model");
    with("messages", json!([]), 400, "messages");
    with("messages", json!("hi"), 400, "messages");
    with(
        "messages",
        json!([{"role": "user"}]),
        400,
        "messages[0].content",
    );
    with(
        "messages",
        json!([{"role": "wizard", "content": "x"}]),
        400,
        "messages[0].role",
    );
    with("temperature", json!("warm"), 400, "temperature");
    with("temperature", json!(9), 400, "temperature");
    with("max_tokens", json!(-5), 400, "max_tokens");
    with("max_tokens", json!("many"), 400, "max_tokens");
    with("n", json!(3), 400, "n");
    with("stop", json!({"a": 1}), 400, "stop");
    with("logit_bias", json!({"999999": 5}), 400, "logit_bias.999999");
    with(
        "response_format",
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "oneOf": [{}, {}]}}}),
        400,
        "response_format.json_schema.schema",
    );
    with(
        "tools",
        json!([{"type": "function", "function": {"name": "bad name"}}]),
        400,
        "tools",
    );
    with("tool_choice", json!("required"), 400, "tool_choice");
    with(
        "messages",
        json!([{"role": "user", "content": "word ".repeat(4000)}]),
        400,
        "messages",
    );
    for (body, status, param) in &cases {
        let r = s.request("POST", "/v1/chat/completions", &[], body);
        assert_eq!(
            r.status,
            *status,
            "{}: {}",
            String::from_utf8_lossy(body)
                .chars()
                .take(200)
                .collect::<String>(),
            String::from_utf8_lossy(&r.body)
        );
        let e = r.json();
        let err = &e["error"];
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{e}"
        );
        assert!(
            err["type"].is_string() && err.get("param").is_some() && err.get("code").is_some(),
            "{e}"
        );
        if let Some(p) = param {
            assert_eq!(err["param"], *p, "{e}");
        }
    }
    // The context: OpenAI's code for a prompt that does not fit.
    let mut long = ok.clone();
    long["messages"] = json!([{"role": "user", "content": "word ".repeat(4000)}]);
    assert_eq!(
        s.post("/v1/chat/completions", &long).json()["error"]["code"],
        "context_length_exceeded"
    );
    // A body over --max-body, declared or not.
    let big = vec![b'x'; 100_000];
    assert_eq!(
        s.request("POST", "/v1/chat/completions", &[], &big).status,
        413
    );
    let mut chunked =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n11170\r\n".to_vec();
    chunked.extend(std::iter::repeat_n(b'x', 70_000));
    assert_eq!(s.raw(&chunked).status, 413);
    // Unknown paths and methods.
    let r = s.get("/v1/nothing");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"].is_string());
    assert_eq!(s.get("/v1/chat/completions").status, 405);
    // Huge max_tokens is capped, not refused; the server still answers normally.
    let mut huge = ok.clone();
    huge["max_tokens"] = json!(1u64 << 60);
    assert_eq!(s.post("/v1/chat/completions", &huge).status, 200);
    let r = s.post("/v1/chat/completions", &ok);
    assert_eq!(r.status, 200);
    assert_eq!(s.get("/health").json()["status"], "ok");
}

#[test]
fn an_api_key_is_required_and_never_logged() {
    let s = Server::start(&model(), &["--api-key", "sekrit-123"]);
    let body = chat_body("hi", json!({"max_tokens": 2})).to_string();
    let r = s.request("POST", "/v1/chat/completions", &[], body.as_bytes());
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    let wrong = [("Authorization", "Bearer sekrit-124")];
    assert_eq!(s.request("GET", "/v1/models", &wrong, b"").status, 401);
    let right = [("Authorization", "Bearer sekrit-123")];
    assert_eq!(
        s.request("POST", "/v1/chat/completions", &right, body.as_bytes())
            .status,
        200
    );
    assert_eq!(
        s.request("GET", "/v1/models", &right, b"").json()["data"][0]["id"],
        "tiny"
    );
    assert_eq!(s.get("/health").status, 200, "/health needs no key");
    std::thread::sleep(Duration::from_millis(100));
    let log = s.log.lock().unwrap().clone();
    assert!(log.contains("chatcmpl-"), "one line per request: {log}");
    assert!(!log.contains("sekrit"), "{log}");
}

#[test]
fn a_full_queue_gets_429_then_recovers() {
    let s = Server::start(
        &model(),
        &[
            "--parallel",
            "1",
            "--queue",
            "0",
            "--debug-step-delay-ms",
            "20",
        ],
    );
    // A long streamed answer holds the only slot.
    let mut c = s.connect();
    let body = chat_body(
        "tell a long story",
        json!({"stream": true, "max_tokens": 400, "logit_bias": no_eos()}),
    )
    .to_string();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(c.try_clone().unwrap());
    let mut line = String::new();
    while !line.starts_with("data:") {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    let r = s.post(
        "/v1/chat/completions",
        &chat_body("hi", json!({"max_tokens": 2})),
    );
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    drop(reader);
    drop(c);
    s.wait_metric("pocket_slots_active", 0.0);
    assert_eq!(
        s.post(
            "/v1/chat/completions",
            &chat_body("hi", json!({"max_tokens": 2}))
        )
        .status,
        200
    );
    assert!(s.metric("pocket_requests_rejected_total") >= 1.0);
}

#[test]
fn clients_that_disconnect_mid_stream_free_their_slots() {
    let s = Server::start(
        &model(),
        &["--parallel", "4", "--debug-step-delay-ms", "10"],
    );
    for _ in 0..6 {
        let mut c = s.connect();
        let body = chat_body(
            "go on",
            json!({"stream": true, "max_tokens": 500, "logit_bias": no_eos()}),
        )
        .to_string();
        write!(
            c,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut seen = 0;
        let mut line = String::new();
        while seen < 3 {
            line.clear();
            r.read_line(&mut line).unwrap();
            seen += line.starts_with("data:") as usize;
        }
        c.shutdown(std::net::Shutdown::Both).unwrap();
    }
    s.wait_metric("pocket_slots_active", 0.0);
    s.wait_metric("pocket_requests_cancelled_total", 6.0);
    assert_eq!(s.metric("pocket_requests_finished_total"), 0.0);
    let r = s.post(
        "/v1/chat/completions",
        &chat_body("hi", json!({"max_tokens": 2})),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_slowloris_connection_is_dropped_and_others_are_served() {
    let s = Server::start(&model(), &["--read-timeout", "1"]);
    let mut slow = s.connect();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 256];
    let n = loop {
        // A header byte now and then does not buy more time.
        let _ = slow.write_all(b"X");
        slow.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match slow.read(&mut buf) {
            Ok(n) => break n,
            Err(_) if t.elapsed() < Duration::from_secs(10) => continue,
            Err(e) => panic!("still open after {:?}: {e}", t.elapsed()),
        }
    };
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let _ = n;
    // A slow body gets 408.
    let mut c = s.connect();
    c.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"mo",
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(c));
    assert_eq!(r.status, 408);
    assert_eq!(s.get("/health").status, 200);
}

#[test]
fn json_schema_answers_parse_and_match() {
    let s = Server::start(&model(), &[]);
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5},
        "n": {"type": "integer", "minimum": -99, "maximum": 99},
        "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"],
        "additionalProperties": false});
    for seed in 0..4 {
        let r = s.post(
            "/v1/chat/completions",
            &chat_body(
                "data please",
                json!({"temperature": 1.0, "seed": seed, "max_tokens": 80,
                       "response_format": {"type": "json_schema",
                           "json_schema": {"name": "rec", "schema": schema, "strict": true}}}),
            ),
        );
        let v = r.json();
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let content: Value =
            serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        let o = content.as_object().unwrap();
        assert_eq!(o.len(), 3);
        assert!(o["name"].as_str().unwrap().chars().count() <= 5);
        assert!(o["n"].is_i64() && o["ok"].is_boolean());
    }
    let r = s.post(
        "/v1/chat/completions",
        &chat_body(
            "x",
            json!({"response_format": {"type": "json_object"}, "max_tokens": 60,
                               "temperature": 1.0, "seed": 3}),
        ),
    );
    let v = r.json();
    if v["choices"][0]["finish_reason"] == "stop" {
        let c: Value =
            serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        assert!(c.is_object());
    }
}

#[test]
fn sigterm_ends_streams_cleanly_and_exits_0() {
    let mut s = Server::start(
        &model(),
        &[
            "--parallel",
            "2",
            "--shutdown-timeout",
            "1",
            "--debug-step-delay-ms",
            "20",
        ],
    );
    let streams: Vec<_> = (0..3)
        .map(|_| {
            let port = s.port;
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let body = chat_body(
                    "forever",
                    json!({"stream": true, "max_tokens": 100000, "logit_bias": no_eos()}),
                )
                .to_string();
                write!(
                    c,
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                read_response(&mut BufReader::new(c))
            })
        })
        .collect();
    s.wait_metric("pocket_slots_active", 2.0);
    let status = s.terminate();
    assert!(status.success(), "{status:?}\n{}", s.log.lock().unwrap());
    for h in streams {
        let r = h.join().unwrap();
        if r.status == 503 {
            continue; // it was waiting for a slot
        }
        assert_eq!(r.status, 200);
        let events = r.events();
        assert_eq!(
            events.last().map(String::as_str),
            Some("[DONE]"),
            "{events:?}"
        );
        let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        assert!(last.get("error").is_some() || last["choices"][0]["finish_reason"].is_string());
    }
}

/// LoRA adapters in the server: loaded at start by name, listed and re-scaled at
/// `/lora-adapters`, chosen per request with llama.cpp's `"lora"` field; each answer equals
/// `pocket run --lora` with the same adapters, an unknown id is a 400.
#[test]
fn lora_adapters_are_chosen_per_request_and_answer_as_pocket_run() {
    let m = model();
    let all = common::root().join("fixtures/lora/qwen2-tiny/all");
    let pat = common::root().join("fixtures/lora/qwen2-tiny/patterns");
    let s = Server::start(
        &m,
        &[
            "--parallel",
            "2",
            "--lora",
            &format!("style={}", all.display()),
            "--lora",
            &format!("{}:0", pat.display()),
        ],
    );
    let list = s.get("/lora-adapters").json();
    assert_eq!(list[0]["name"], "style");
    assert_eq!(list[0]["scale"], 1.0);
    assert_eq!(list[1]["name"], "patterns");
    assert_eq!(list[1]["scale"], 0.0);
    let run = |lora: &[String]| -> String {
        let mut args: Vec<String> = vec!["run".into(), m.display().to_string()];
        for l in lora {
            args.push("--lora".into());
            args.push(l.clone());
        }
        args.extend(
            [
                "--system",
                "Be brief.",
                "-p",
                "Hello there",
                "-n",
                "24",
                "--temp",
                "0",
                "--json",
            ]
            .map(String::from),
        );
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = common::pocket_ok(&refs);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["text"].as_str().unwrap().to_string()
    };
    let chat = |extra: Value| -> String {
        let r = s.post("/v1/chat/completions", &chat_body("Hello there", extra));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let base = run(&[]);
    let styled = run(&[all.display().to_string()]);
    let both = run(&[
        format!("{}:0.5", all.display()),
        format!("{}:1.5", pat.display()),
    ]);
    assert_ne!(base, styled, "the adapter changes the answer");
    // No "lora": the server's scales (style at 1, patterns at 0).
    assert_eq!(chat(json!({})), styled);
    assert_eq!(chat(json!({"lora": []})), base);
    assert_eq!(
        chat(json!({"lora": [{"id": 0, "scale": 0.5}, {"id": "patterns", "scale": 1.5}]})),
        both
    );
    // New default scales.
    let r = s.post("/lora-adapters", &json!([{"id": 1, "scale": 0}]));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()[0]["scale"], 0.0);
    assert_eq!(chat(json!({})), base);
    let bad = s.post(
        "/v1/chat/completions",
        &chat_body("Hi", json!({"lora": [{"id": 7, "scale": 1}]})),
    );
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("invalid adapter id"));
    let bad = s.post("/v1/chat/completions", &chat_body("Hi", json!({"lora": 3})));
    assert_eq!(bad.status, 400);
}
