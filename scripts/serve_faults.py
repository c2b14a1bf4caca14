"""Faults against `pocket serve`, each leaving the server healthy (a normal request after each
must succeed), on a real model (SmolLM2 by default). Standard library only.

  1. 200 malformed requests: bad JSON, wrong types, unknown model, huge max_tokens, empty
     messages, a 10 MB body, invalid UTF-8, unsupported fields ... each gets a 4xx with
     OpenAI's error object, never a 5xx;
  2. 50 clients that disconnect mid-stream: their slots are freed (/metrics: cancelled +50,
     active slots back to 0);
  3. slowloris connections (a header byte every 0.3 s) are closed within the read timeout while
     normal requests are served;
  4. a full queue: 429s with Retry-After, then recovery;
  5. memory: RSS after faults 1-4, run twice, within 10 % of RSS before them (after a warm-up
     that filled every slot), and a second run moves it by at most 5 % (each kind of request
     grows the allocator's pools once, then they stay: measured per kind, no leak);
  6. SIGTERM during load: every in-flight stream ends with a final chunk, an error event and
     [DONE], or a clean close; the process exits 0; nothing panicked.

Usage: python scripts/serve_faults.py --pocket target/release/pocket [--model GGUF]
"""
import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import SMOLLM2, checks, metrics, ok, pocket_server  # noqa: E402



def post(port, path, body, headers=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def normal(port):
    body = json.dumps({"model": "model", "messages": [{"role": "user", "content": "Hi!"}],
                       "max_tokens": 4, "temperature": 0})
    status, _, data = post(port, "/v1/chat/completions", body)
    ok(status == 200, f"a normal request after the fault: {status} {data[:200]!r}")
    return json.loads(data)


def malformed_cases():
    """200 malformed request bodies (bytes), cycling through kinds with random variation."""
    base = {"model": "model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    rnd = random.Random(7)

    def with_(**kw):
        b = json.loads(json.dumps(base))
        for k, v in kw.items():
            if v is ...:
                b.pop(k, None)
            else:
                b[k] = v
        return json.dumps(b).encode()

    kinds = [
        lambda: b"{" + bytes(rnd.randrange(32, 127) for _ in range(rnd.randrange(0, 40))),
        lambda: b"",
        lambda: b"null",
        lambda: json.dumps([base]).encode(),
        lambda: b'{"model": "model", "messages": [' + b"[" * 200,
        lambda: with_(model=rnd.choice(["gpt-4o", "", "MODEL", "model ", "x" * 500])),
        lambda: with_(model=rnd.choice([1, None, [], {}])),
        lambda: with_(model=...),
        lambda: with_(messages=[]),
        lambda: with_(messages=...),
        lambda: with_(messages=rnd.choice(["hi", 5, {"role": "user"}, [1, 2]])),
        lambda: with_(messages=[{"role": rnd.choice(["bot", "", 7]), "content": "x"}]),
        lambda: with_(messages=[{"role": "user", "content": rnd.choice([None, 5, {"a": 1}])}]),
        lambda: with_(messages=[{"role": "user", "content": [{"type": "image_url",
                                                              "image_url": {"url": "x"}}]}]),
        lambda: with_(messages=[{"role": "tool", "content": "x"}]),
        lambda: with_(temperature=rnd.choice(["hot", -1, 2.5, [], True])),
        lambda: with_(top_p=rnd.choice([1.5, -0.2, "x"])),
        lambda: with_(max_tokens=rnd.choice([0, -5, 1.5, "9", 10 ** 30, -10 ** 20, True])),
        lambda: with_(max_completion_tokens=rnd.choice([0, "x"])),
        lambda: with_(n=rnd.choice([0, 2, 16, "1"])),
        lambda: with_(stop=rnd.choice([5, {"a": 1}, [1], ["x"] * 40])),
        lambda: with_(seed=rnd.choice(["x", 1.5, []])),
        lambda: with_(stream=rnd.choice(["yes", 1])),
        lambda: with_(stream_options={"include_usage": True}),
        lambda: with_(logit_bias=rnd.choice([{"x": 1}, {"5": 500}, {"99999999": 1}, [1]])),
        lambda: with_(logprobs=True, top_logprobs=rnd.choice([21, -1, "3"])),
        lambda: with_(top_logprobs=3),
        lambda: with_(response_format=rnd.choice([{"type": "xml"}, {"type": "json_schema"},
                                                  "json", {"type": "json_schema",
                                                           "json_schema": {"name": "a b"}}])),
        lambda: with_(response_format={"type": "json_schema", "json_schema": {
            "name": "s", "schema": rnd.choice([{"type": "object", "oneOf": [{}, {}]},
                                               {"type": "string", "pattern": "(("},
                                               {"$ref": "#/nowhere"}])}}),
        lambda: with_(tools=rnd.choice([{}, [{"type": "function", "function": {}}],
                                        [{"type": "retrieval"}],
                                        [{"type": "function", "function": {"name": "a b"}}]])),
        lambda: with_(tool_choice=rnd.choice(["always", {"type": "function"}, "required", 5])),
        lambda: with_(presence_penalty=rnd.choice([3, "x"])),
        lambda: with_(messages=[{"role": "user", "content": "word " * 5000}]),
        lambda: b'{"model": "model", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        lambda: b"\xef\xbb\xbf" + with_(),  # a UTF-8 byte-order mark is not JSON
        lambda: b'{"model": "model", "messages": [{"role": "user", "content": "\\ud800"}]}',
    ]
    cases = []
    for i in range(200):
        cases.append((i % len(kinds), kinds[i % len(kinds)]()))
    return cases


def check_malformed(port):
    statuses = {}
    for kind, body in malformed_cases():
        status, headers, data = post(port, "/v1/chat/completions", body)
        ok(400 <= status < 500, f"malformed case {kind} {body[:120]!r}: status {status} {data[:200]!r}")
        e = json.loads(data)["error"]
        ok(isinstance(e.get("message"), str) and e["message"] and "type" in e and "param" in e
           and "code" in e, f"OpenAI error object for case {kind}: {e}")
        statuses[status] = statuses.get(status, 0) + 1
        normal(port)
    # The 10 MB body, twice: declared, and sent chunked without a length.
    big = b'{"model": "model", "messages": [{"role": "user", "content": "' + b"x" * (10 << 20) + b'"}]}'
    status, _, _ = post(port, "/v1/chat/completions", big)
    ok(status == 413, f"10 MB body: {status}")
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    try:
        for _ in range(12):
            s.sendall(b"100000\r\n" + b"x" * 0x100000 + b"\r\n")
    except OSError:
        pass  # the server may close once the limit is passed
    s.settimeout(30)
    head = s.recv(64)
    s.close()
    ok(head.startswith(b"HTTP/1.1 413"), f"chunked 10 MB body: {head!r}")
    statuses[413] = statuses.get(413, 0) + 2
    normal(port)
    print(f"malformed: 202 requests, statuses {dict(sorted(statuses.items()))}, "
          "a normal request after each")


def stream_request(port, max_tokens=200):
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"model": "model", "messages": [{"role": "user",
                       "content": "Tell me a long story about a dragon."}],
                       "max_tokens": max_tokens, "stream": True, "temperature": 0.8,
                       "seed": random.randrange(1 << 30)}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def check_disconnects(port, n=50):
    before = metrics(f"http://127.0.0.1:{port}")

    def one():
        s = stream_request(port, 256)
        buf = b""
        while buf.count(b"data: ") < 3:
            d = s.recv(4096)
            if not d:
                break
            buf += d
        s.close()

    # Five at a time, each five once the previous ones have left the engine (their slots
    # freed): within slots + queue, so none is refused with 429.
    for batch in range(0, n, 5):
        ts = [threading.Thread(target=one) for _ in range(5)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        t0 = time.time()
        while True:
            m = metrics(f"http://127.0.0.1:{port}")
            if m["pocket_slots_active"] == 0 and m["pocket_queue_depth"] == 0:
                break
            ok(time.time() - t0 < 30, f"slots freed after 5 disconnects: {m}")
            time.sleep(0.02)
    t0 = time.time()
    while True:
        m = metrics(f"http://127.0.0.1:{port}")
        gone = m["pocket_requests_cancelled_total"] - before["pocket_requests_cancelled_total"]
        # A sampled answer can end (EOS) before its client has read three events: it counts
        # as finished, not cancelled.
        done = m["pocket_requests_finished_total"] - before["pocket_requests_finished_total"]
        if m["pocket_slots_active"] == 0 and m["pocket_queue_depth"] == 0 and gone + done >= n:
            break
        ok(time.time() - t0 < 60, f"slots freed after disconnects: {m}")
        time.sleep(0.1)
    ok(gone >= n // 2, f"most dropped streams were cancelled, not finished: {gone} of {n}")
    normal(port)
    print(f"disconnects: {n} streams dropped after 3 events; {gone:.0f} cancelled, {done:.0f} "
          "finished first; active slots back to 0")


def check_slowloris(port, read_timeout):
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    t0 = time.time()
    closed = [None] * len(socks)
    while any(c is None for c in closed) and time.time() - t0 < read_timeout + 10:
        for i, s in enumerate(socks):
            if closed[i] is not None:
                continue
            try:
                s.sendall(b"X")
                s.settimeout(0.01)
                if s.recv(1024) == b"":
                    closed[i] = time.time() - t0
            except (socket.timeout, BlockingIOError):
                pass
            except OSError:
                closed[i] = time.time() - t0
        normal(port)  # served while the slow connections hang on
        time.sleep(0.3)
    ok(all(c is not None for c in closed), f"slowloris connections closed: {closed}")
    ok(max(closed) <= read_timeout + 3, f"within the read timeout: {max(closed):.1f} s")
    for s in socks:
        s.close()
    print(f"slowloris: 20 connections trickling header bytes closed after "
          f"{min(closed):.1f}-{max(closed):.1f} s (read timeout {read_timeout} s); "
          "normal requests served meanwhile")


def check_queue(port, slots, queue):
    results = []
    lock = threading.Lock()

    def one():
        body = json.dumps({"model": "model", "messages": [{"role": "user", "content":
                           "Write a story."}], "max_tokens": 64, "temperature": 0.8})
        status, headers, data = post(port, "/v1/chat/completions", body)
        with lock:
            results.append((status, headers.get("Retry-After") or headers.get("retry-after")))

    ts = [threading.Thread(target=one) for _ in range(3 * (slots + queue))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    codes = [r[0] for r in results]
    busy = [r for r in results if r[0] == 429]
    ok(set(codes) <= {200, 429}, f"only 200 and 429: {codes}")
    ok(busy and all(r[1] and int(r[1]) >= 1 for r in busy), "429s carry Retry-After")
    ok(codes.count(200) >= slots + queue, f"every slot and queue place was used: {codes}")
    normal(port)
    print(f"full queue: {len(codes)} at once -> {codes.count(200)} answered, {len(busy)} got 429 "
          f"with Retry-After; recovered")


def check_sigterm(srv):
    port = srv.port
    outs = []

    def one():
        s = stream_request(port, 256)
        data = b""
        s.settimeout(60)
        while True:
            try:
                d = s.recv(65536)
            except OSError:
                break
            if not d:
                break
            data += d
        outs.append(data)

    ts = [threading.Thread(target=one) for _ in range(8)]
    for t in ts:
        t.start()
    time.sleep(1.0)
    code = srv.terminate()
    for t in ts:
        t.join()
    ok(code == 0, f"exit status after SIGTERM: {code}")
    endings = {}
    for data in outs:
        text = data.decode("utf-8", "replace")
        head = text.split("\r\n", 1)[0]
        if " 503 " in head:
            endings["503 (was waiting)"] = endings.get("503 (was waiting)", 0) + 1
            continue
        ok(" 200 " in head, f"stream status: {head}")
        ok(text.rstrip().endswith("0") or "data: [DONE]" in text,
           f"the stream ended with a final chunk or a clean close: {text[-300:]!r}")
        events = [e for e in text.split("\n\n") if "data: " in e]
        last = events[-2] if len(events) >= 2 else ""
        kind = "error event" if '"error"' in last else ("finish chunk" if "finish_reason\":\"" in last
                                                        else "clean close")
        endings[kind] = endings.get(kind, 0) + 1
    ok("panicked" not in srv.log(), "nothing panicked")
    print(f"SIGTERM during 8 streams: exit 0; endings {endings}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pocket", default="target/release/pocket")
    ap.add_argument("--model", default=SMOLLM2)
    a = ap.parse_args()
    slots, queue, read_timeout = 4, 4, 2
    with pocket_server(a.pocket, a.model, "--parallel", str(slots), "--queue", str(queue),
                       "--read-timeout", str(read_timeout), "--max-body", str(1 << 20),
                       "--ctx", "1024", "--max-tokens-limit", "256",
                       "--shutdown-timeout", "2") as srv:
        # Warm-up: every slot holds a long answer once, so the caches are grown.
        ts = [threading.Thread(target=lambda: post(srv.port, "/v1/chat/completions", json.dumps(
            {"model": "model", "messages": [{"role": "user", "content": "Tell a long story."}],
             "max_tokens": 256, "temperature": 0.8}))) for _ in range(slots)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        normal(srv.port)
        # And the prompts the faults send, once, so the prompt cache holds them already.
        check_disconnects(srv.port, 5)
        rss = [srv.rss()[0]]
        # Twice: the first run's growth is the server settling (threads of the blocking pool,
        # buffers), the second's would be a leak.
        for _ in range(2):
            check_malformed(srv.port)
            check_disconnects(srv.port)
            check_slowloris(srv.port, read_timeout)
            check_queue(srv.port, slots, queue)
            rss.append(srv.rss()[0])
        g1, g2 = rss[1] / rss[0] - 1, rss[2] / rss[1] - 1
        print(f"memory: RSS {rss[0] / 1e6:.1f} MB before the faults, {rss[1] / 1e6:.1f} MB after "
              f"them ({g1 * 100:+.1f} %), {rss[2] / 1e6:.1f} MB after a second run "
              f"({g2 * 100:+.1f} %)")
        ok(abs(g1) <= 0.10, f"RSS after the faults within 10 % of before: {rss}")
        ok(abs(g2) <= 0.05, f"a second fault run moved RSS by {g2 * 100:+.1f} %")
        check_sigterm(srv)
    print(f"serve_faults: {checks[0]} checks passed")


if __name__ == "__main__":
    main()
