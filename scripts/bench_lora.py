#!/usr/bin/env python3
"""What an unmerged LoRA adapter costs (scripts/bench-lora.sh makes the files).

1. `pocket bench` (prefill 512 tokens, decode 128, 2 threads) on the base, with the adapter
   unmerged (`--lora`), and on the export with the adapter merged: engines alternate round by
   round, one repetition each, medians over rounds; ratios against the base of the same rounds.
2. `pocket serve` with two adapters loaded: C concurrent clients, greedy, `max_tokens` each,
   every client's requests with no adapter, all with adapter a ("one"), or half with a and half
   with b ("two"); aggregate generated tokens/s, modes alternating round by round, medians.

Usage: bench_lora.py POCKET BASE ADAPTER_A ADAPTER_B MERGED [--rounds 5] [--clients 8]
Prints one JSON object.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import pocket_server  # noqa: E402

PROMPTS = ["Tell me about the sea.", "Write a list of fruits.", "Explain a CPU.", "Describe a cat.",
           "What is rain?", "Name some rivers.", "Count to twenty.", "Say something kind."]


def bench(pocket, model, *extra):
    out = subprocess.run([pocket, "bench", model, "--pp", "512", "-n", "128", "--depth", "0",
                          "--reps", "1", "--json", *extra], check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    return j["pp"]["tok_s_median"], j["tg"]["tok_s_median"]


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def load(base, clients, per_client, max_tokens, mode):
    tokens = [0] * clients
    errors = []

    def client(c):
        lora = {"none": [], "one": [{"id": "a", "scale": 1.0}],
                "two": [{"id": "a" if c % 2 == 0 else "b", "scale": 1.0}]}[mode]
        for i in range(per_client):
            body = {"model": "model", "max_tokens": max_tokens, "temperature": 0, "lora": lora,
                    "messages": [{"role": "user", "content": PROMPTS[(c + i) % len(PROMPTS)]}]}
            try:
                tokens[c] += post(base, body)["usage"]["completion_tokens"]
            except Exception as e:  # noqa: BLE001 - reported, and the run fails
                errors.append(repr(e))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        sys.exit(f"{mode}: {len(errors)} requests failed, first: {errors[0]}")
    return sum(tokens) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pocket")
    ap.add_argument("base")
    ap.add_argument("adapter_a")
    ap.add_argument("adapter_b")
    ap.add_argument("merged")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2, help="per client per round")
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()

    runs = {"base": [], "lora": [], "merged": []}
    for r in range(a.rounds):
        for name, model, extra in [("base", a.base, []), ("lora", a.base, ["--lora", a.adapter_a]),
                                   ("merged", a.merged, [])]:
            runs[name].append(bench(a.pocket, model, *extra))
        print(f"round {r + 1}: " + "  ".join(f"{k} pp {v[-1][0]:.0f} tg {v[-1][1]:.1f}"
                                             for k, v in runs.items()), file=sys.stderr)
    med = {k: {"prefill_tok_s": statistics.median(p for p, _ in v),
               "decode_tok_s": statistics.median(t for _, t in v)} for k, v in runs.items()}
    ratios = {k: {"prefill": statistics.median(x[0] / b[0] for x, b in zip(runs[k], runs["base"])),
                  "decode": statistics.median(x[1] / b[1] for x, b in zip(runs[k], runs["base"]))}
              for k in ["lora", "merged"]}

    serve = {"none": [], "one": [], "two": []}
    with pocket_server(a.pocket, a.base, "--lora", f"a={a.adapter_a}", "--lora", f"b={a.adapter_b}",
                       "--parallel", str(a.clients), "--prompt-cache", "0") as srv:
        load(srv.base, a.clients, 1, 8, "two")  # warm-up
        for r in range(a.rounds):
            for mode in serve:
                serve[mode].append(load(srv.base, a.clients, a.requests, a.max_tokens, mode))
            print(f"serve round {r + 1}: " + "  ".join(f"{k} {v[-1]:.1f} tok/s" for k, v in serve.items()),
                  file=sys.stderr)
    serve_med = {k: statistics.median(v) for k, v in serve.items()}
    print(json.dumps({
        "bench": med, "ratios": ratios,
        "serve": {"clients": a.clients, "tok_s": serve_med,
                  "two_over_one": statistics.median(t / o for t, o in zip(serve["two"], serve["one"])),
                  "one_over_none": statistics.median(o / n for o, n in zip(serve["one"], serve["none"]))},
        "rounds": a.rounds}, indent=1))


if __name__ == "__main__":
    main()
