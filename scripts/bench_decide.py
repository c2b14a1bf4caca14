#!/usr/bin/env python3
"""Decision speed (docs/decisions.md, "Speed"): standard library only; every figure is a median
over alternating runs in one session.

  latency    `pocket decide --json` (prefill + readout) against `pocket run --choices --json`
             (prefill + constraint set-up + decoding) on the same prompt text, 4 and 12
             options, per readout; model load excluded from both (it is the same file)
  shared     5 questions about one ~300-token state in one request, against the 5 asked one
             per request (each its own `pocket decide`)
  serve      `pocket serve`: 1 and 16 concurrent clients, decisions per second and latency
             p50/p99; and one 12-intent question asked of new 20-token states, question-first,
             the prompt cache warm (the question asked before) against cold (a new question)

Usage: scripts/bench_decide.py MODEL [--pocket target/release/pocket] [--reps 10] [--only latency,shared,serve]
Prints a JSON report on stdout and a summary on stderr.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import free_port, Server  # noqa: E402

INTENTS = {
    "set_alarm": "set, change or cancel an alarm", "weather": "weather and forecasts",
    "play_music": "play or control music", "send_message": "send a text or chat message",
    "call_contact": "phone someone", "navigation": "directions, routes and traffic",
    "calendar": "calendar events and meetings", "timer": "countdown timers",
    "smart_home": "lights, heating and locks", "reminder": "reminders and to-dos",
    "shopping": "shopping lists and orders", "other": "anything else",
}
STATES = ["Wake me up at 6:30 tomorrow.", "Will it rain in Oslo this afternoon?",
          "Play some relaxing jazz, please.", "Text Anna that I'm running late.",
          "Call the dentist's office.", "How do I get to the airport from here?",
          "Move my 3 pm meeting to Friday.", "Set a timer for twelve minutes.",
          "Turn off the kitchen lights.", "Remind me to buy milk tonight.",
          "Order more coffee filters.", "What's the capital of Peru?"]


def question(n):
    keys = list(INTENTS)[:n - 1] + ["other"]
    return {"type": "choice", "instructions": "Which intent is this phone-assistant request?",
            "criteria": {k: INTENTS[k] for k in keys}}


def run_json(argv):
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def decide(pocket, model, body, readout, extra=()):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
    try:
        d = run_json([pocket, "decide", model, "--request", f.name, "--json",
                      "--readout", readout, *extra])
    finally:
        os.unlink(f.name)
    t = d["timings"]
    return t["prefill_ms"] + t["readout_ms"], d


def prompt_text(pocket, model, body):
    """The user turn `pocket decide` asks (keys/constrained readouts list option names)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
    try:
        out = subprocess.run([pocket, "decide", model, "--request", f.name, "--show-prompt"],
                             capture_output=True, text=True, check=True).stderr
    finally:
        os.unlink(f.name)
    # The shown prompt is the whole chat; the user turn is what `pocket run -p` takes.
    text = out.split("\n", 1)[1]
    for start in ("<|im_start|>user\n", "<start_of_turn>user\n", "<|start_header_id|>user<|end_header_id|>\n\n"):
        if start in text:
            text = text.split(start, 1)[1]
            break
    for end in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>"):
        if end in text:
            text = text.split(end, 1)[0]
            break
    return text


def choices_run(pocket, model, text, keys):
    d = run_json([pocket, "run", model, "-p", text, "--choices", ",".join(keys), "--json"])
    t = d["timings"]
    return t["prefill_ms"] + t["decode_ms"] + t.get("constraint_setup_ms", 0.0), d["text"]


def latency(a, report):
    out = {}
    for n in (4, 12):
        q = question(n)
        keys = list(q["criteria"])
        rows = {"choices": []}
        for readout in ("constrained", "keys", "letters"):
            rows[readout] = []
        for i in range(a.reps):
            body = {"state": STATES[i % len(STATES)], "questions": {"intent": q}}
            text = prompt_text(a.pocket, a.model, body)
            ms, _ = choices_run(a.pocket, a.model, text, keys)
            rows["choices"].append(ms)
            for readout in ("constrained", "keys", "letters"):
                ms, _ = decide(a.pocket, a.model, body, readout)
                rows[readout].append(ms)
        med = {k: statistics.median(v) for k, v in rows.items()}
        out[f"{n}_options"] = {"median_ms": med,
                               "speedup_vs_choices": {k: med["choices"] / med[k] for k in med if k != "choices"}}
        print(f"latency, {n} options (p50 ms): " + ", ".join(f"{k} {v:.0f}" for k, v in med.items()),
              file=sys.stderr)
    report["latency"] = out


def shared(a, report):
    state = " ".join(["The customer writes that the parcel with order 4471 arrived late and damaged,"
                      " that support did not answer two emails, and that they expect a full refund."] * 6)
    qs = {
        "intent": {"type": "choice", "instructions": "What does the customer want?",
                   "criteria": {"refund": None, "replacement": None, "information": None, "other": None}},
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        "urgency": {"type": "score", "instructions": "How urgent is it?",
                    "criteria": ["can wait", "this week", "today"]},
        "churn": {"type": "noul", "instructions": "Might the customer leave?"},
        "topic": {"type": "choice", "instructions": "Which team should answer?",
                  "criteria": {"billing": None, "shipping": None, "technical": None}},
    }
    together, apart = [], []
    tokens = None
    for _ in range(a.reps):
        ms, d = decide(a.pocket, a.model, {"state": state, "questions": qs}, a.readout)
        together.append(ms)
        tokens = d["usage"]["input_tokens"]
        total = 0.0
        for name, q in qs.items():
            ms, _ = decide(a.pocket, a.model, {"state": state, "questions": {name: q}}, a.readout)
            total += ms
        apart.append(total)
    t, s = statistics.median(together), statistics.median(apart)
    report["shared"] = {"input_tokens": tokens, "one_request_ms": t, "five_requests_ms": s,
                        "speedup": s / t, "readout": a.readout}
    print(f"5 questions, {tokens} input tokens: one request {t:.0f} ms, five requests {s:.0f} ms "
          f"({s / t:.2f}x)", file=sys.stderr)


def post(base, body):
    req = urllib.request.Request(base + "/v1/systemone", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()
    return time.perf_counter() - t


def load(base, clients, seconds, q):
    lat, lock, stop = [], threading.Lock(), time.time() + seconds

    def client(c):
        i = 0
        while time.time() < stop:
            s = f"{STATES[(c + i) % len(STATES)]} (request {c}-{i})"
            d = post(base, {"state": s, "questions": {"intent": q}})
            with lock:
                lat.append(d)
            i += 1

    t0 = time.time()
    ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    wall = time.time() - t0
    lat.sort()
    return {"clients": clients, "decisions": len(lat), "per_second": len(lat) / wall,
            "p50_ms": 1e3 * lat[len(lat) // 2], "p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def serve(a, report):
    q = question(12)
    out = {"load": []}
    for order in ("state-first", "question-first"):
        port = free_port()
        argv = [a.pocket, "serve", a.model, "--port", str(port), "--parallel", "16",
                "--readout", a.readout, "--order", order]
        with Server(argv, port) as srv:
            post(srv.base, {"state": "warm up", "questions": {"intent": q}})
            for c in (1, 16):
                r = dict(load(srv.base, c, a.seconds, q), order=order)
                out["load"].append(r)
                print(f"serve, {order}, {c} clients: {r['per_second']:.1f} decisions/s, "
                      f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms", file=sys.stderr)
            srv.terminate()
    port = free_port()
    argv = [a.pocket, "serve", a.model, "--port", str(port), "--parallel", "1",
            "--readout", a.readout, "--order", "question-first"]
    with Server(argv, port) as srv:
        post(srv.base, {"state": "warm up", "questions": {"intent": q}})
        warm, cold = [], []
        for i in range(a.reps):
            s = STATES[i % len(STATES)] + " Thanks!"
            fresh = dict(q, instructions=f"Which intent is this phone-assistant request? (form {i})")
            cold.append(post(srv.base, {"state": s, "questions": {"intent": fresh}}))
            # The question seen before: its tokens are a cached prefix.
            warm.append(post(srv.base, {"state": s + " ", "questions": {"intent": q}}))
        w, c = 1e3 * statistics.median(warm), 1e3 * statistics.median(cold)
        out["prompt_cache"] = {"warm_p50_ms": w, "cold_p50_ms": c, "speedup": c / w}
        print(f"repeated question, question-first: warm {w:.0f} ms, cold {c:.0f} ms ({c / w:.2f}x)",
              file=sys.stderr)
        srv.terminate()
    report["serve"] = out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--pocket", default="target/release/pocket")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--readout", default="keys")
    ap.add_argument("--only", default="latency,shared,serve")
    a = ap.parse_args()
    report = {"model": os.path.basename(a.model), "reps": a.reps}
    for part in a.only.split(","):
        {"latency": latency, "shared": shared, "serve": serve}[part](a, report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
