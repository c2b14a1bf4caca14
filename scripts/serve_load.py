"""A bounded load run against `pocket serve` (and llama-cpp-python's `llama_cpp.server` on the
same GGUF, with --llamacpp): C concurrent clients x R requests each through the official
`openai` client, half of them streamed, on loopback.

Every request must complete correctly: an answer that ended by itself or at max_tokens, usage
consistent with it, and for pocket every greedy answer equal to the answer the same request
got alone (pocket's answers do not depend on the load). Reported per engine and round:
aggregate generated tokens/s, the same for one client alone (the single stream), their ratio,
p50/p99 time to first token (streamed requests) and total latency, errors, and the server's
peak RSS against model file + KV budget + 200 MB. Engines alternate round by round; the table
gives medians over rounds.

Usage:
  python scripts/serve_load.py --pocket target/release/pocket --model GGUF
      [--clients 16] [--requests 20] [--max-tokens 64] [--parallel 16] [--rounds 2]
      [--prompt-cache MB] [--llamacpp VENV_PYTHON] [--llama-server BIN] [--json-out FILE]

--llama-server takes llama.cpp's own server, run with -np PARALLEL: built from the llama.cpp
vendored in the llama-cpp-python 0.3.36 sdist (`cmake -S vendor/llama.cpp -B build -G Ninja
-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON`, then
`cmake --build build --target llama-server`; about 15 minutes on 2 cores).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time

from openai import OpenAI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import (  # noqa: E402
    SMOLLM2, llama_server, llamacpp_server, metrics, pocket_server)

QUESTIONS = [
    "What is the capital of France?", "Write a haiku about autumn.",
    "Explain photosynthesis in two sentences.", "List three uses of a paperclip.",
    "What is 17 times 23?", "Give me a name for a grey cat.",
    "Translate 'good morning' into Spanish.", "Why is the sky blue?",
    "Summarize the plot of Cinderella.", "What does a CPU do?",
    "Suggest a weekend activity.", "How do I boil an egg?",
    "Name a famous painter.", "What is a prime number?",
    "Write a one-line joke about computers.", "What should I pack for a beach trip?",
]


def request_plan(client_id, i, max_tokens):
    """The i-th request of a client: a question, streamed or not, greedy or seeded sampling."""
    q = QUESTIONS[(client_id * 7 + i) % len(QUESTIONS)]
    stream = (client_id + i) % 2 == 0
    greedy = i % 3 != 2
    kw = {"temperature": 0} if greedy else {"temperature": 0.8, "top_p": 0.95, "seed": i}
    return q, stream, greedy, dict(max_tokens=max_tokens, **kw)


def one(client, q, stream, kw):
    """One request: (text, completion_tokens, finish_reason, ttft or None, latency, whether
    the count is the server's usage rather than the streamed chunks)."""
    t0 = time.perf_counter()
    msgs = [{"role": "user", "content": q}]
    if not stream:
        r = client.chat.completions.create(model="model", messages=msgs, **kw)
        c = r.choices[0]
        return c.message.content or "", r.usage.completion_tokens, c.finish_reason, None, \
            time.perf_counter() - t0, True
    parts, ttft, usage, finish, chunks = [], None, None, None, 0
    s = client.chat.completions.create(model="model", messages=msgs, stream=True,
                                       stream_options={"include_usage": True}, **kw)
    for chunk in s:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                parts.append(ch.delta.content)
                chunks += 1
            finish = ch.finish_reason or finish
    # A server without stream_options.include_usage (llama_cpp.server) sends one chunk per
    # token: the chunks are the count.
    n = usage.completion_tokens if usage else chunks
    return "".join(parts), n, finish, ttft, time.perf_counter() - t0, usage is not None


def run_load(base, clients, requests, max_tokens, reference=None):
    """C clients x R requests; returns the figures and each greedy request's text."""
    results, errors, lock = [], [], threading.Lock()

    def worker(cid):
        client = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
        for i in range(requests):
            q, stream, greedy, kw = request_plan(cid, i, max_tokens)
            try:
                text, n, finish, ttft, lat, exact = one(client, q, stream, kw)
                problem = None
                if finish not in ("stop", "length"):
                    problem = f"finish_reason {finish}"
                elif n is None or n < 1 or n > max_tokens:
                    problem = f"completion_tokens {n}"
                elif finish == "length" and exact and n != max_tokens:
                    problem = f"cut at {n} of {max_tokens} tokens"
                elif greedy and reference is not None and reference.get(q) not in (None, text):
                    problem = f"greedy answer differs from its answer alone: {q!r}"
                with lock:
                    if problem:
                        errors.append(problem)
                    results.append((q, greedy, stream, text, n, ttft, lat))
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[4] or 0 for r in results)
    ttfts = sorted(r[5] for r in results if r[5] is not None)
    lats = sorted(r[6] for r in results)

    def pct(v, p):
        return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")

    texts = {r[0]: r[3] for r in results if r[1]}
    return {
        "clients": clients, "requests": clients * requests, "completed": len(results),
        "errors": errors, "wall_s": wall, "tokens": tokens, "tok_per_s": tokens / wall,
        "ttft_p50": pct(ttfts, 50), "ttft_p99": pct(ttfts, 99),
        "latency_p50": pct(lats, 50), "latency_p99": pct(lats, 99),
    }, texts


def cpu_seconds():
    """This process's CPU time (the load generator's own share of the machine)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(name, start, a, check_identity):
    """One round on one engine: single stream, then the load; the server's RSS meanwhile."""
    with start() as srv:
        peak = [0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], srv.rss()[0])
                time.sleep(0.05)

        th = threading.Thread(target=sample)
        th.start()
        # Warm-up: one request (loads pages, builds caches).
        run_load(srv.base, 1, 1, 8)
        single, texts = run_load(srv.base, 1, len(QUESTIONS), a.max_tokens)
        # pocket's greedy answers under load must equal the same requests' answers alone.
        c0 = cpu_seconds()
        m0 = metrics(srv.base) if name == "pocket" else {}
        load, _ = run_load(srv.base, a.clients, a.requests, a.max_tokens,
                           texts if check_identity else None)
        load["client_cpu_share"] = (cpu_seconds() - c0) / load["wall_s"]
        stop.set()
        th.join()
        extra = {}
        if name == "pocket":
            m = metrics(srv.base)
            d = lambda k: m.get(k, 0) - m0.get(k, 0)  # noqa: E731
            load["mean_batch"] = d("pocket_batch_size_sum") / max(1.0, d("pocket_batch_size_count"))
            load["engine_prefill_s"] = d("pocket_engine_prefill_seconds_total")
            load["engine_decode_s"] = d("pocket_engine_decode_seconds_total")
            load["prompt_cache_hits"] = d("pocket_prompt_cache_hits_total")
            extra = {"kv_budget_bytes": m.get("pocket_kv_cache_budget_bytes", 0),
                     "prompt_cache_budget_bytes": m.get("pocket_prompt_cache_budget_bytes", 0),
                     "prompt_cache_bytes": m.get("pocket_prompt_cache_bytes", 0),
                     "prefix_hit_ratio": m.get("pocket_prefix_cache_hit_ratio", 0),
                     "mean_batch": m.get("pocket_batch_size_sum", 0)
                     / max(1.0, m.get("pocket_batch_size_count", 1)),
                     "prefill_s": m.get("pocket_engine_prefill_seconds_total", 0),
                     "decode_s": m.get("pocket_engine_decode_seconds_total", 0)}
        code = srv.terminate()
        return {"engine": name, "single": single, "load": load, "peak_rss": peak[0],
                "exit": code, **extra}, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pocket", default="target/release/pocket")
    ap.add_argument("--model", default=SMOLLM2)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prompt-cache", type=int, help="pocket serve's --prompt-cache (MB)")
    ap.add_argument("--llamacpp", help="python of a venv with llama-cpp-python[server]")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    model_bytes = os.path.getsize(a.model)
    extra_args = [] if a.prompt_cache is None else ["--prompt-cache", str(a.prompt_cache)]
    engines = [("pocket", lambda: pocket_server(a.pocket, a.model, "--parallel",
                                                str(a.parallel), "--ctx", str(a.ctx),
                                                *extra_args))]
    if a.llamacpp:
        engines.append(("llama.cpp", lambda: llamacpp_server(a.llamacpp, a.model, a.parallel,
                                                             a.ctx)))
    if a.llama_server:
        engines.append(("llama-server", lambda: llama_server(a.llama_server, a.model,
                                                             a.parallel, a.ctx)))
    rows, failed = [], False
    for rnd in range(a.rounds):
        order = engines if rnd % 2 == 0 else engines[::-1]
        for name, start in order:
            row, _ = measure(name, start, a, name == "pocket")
            row["round"] = rnd
            rows.append(row)
            ld = row["load"]
            print(f"[{name} round {rnd}] {ld['completed']}/{ld['requests']} ok, "
                  f"{len(ld['errors'])} errors, {ld['tok_per_s']:.1f} tok/s "
                  f"(single {row['single']['tok_per_s']:.1f}), exit {row['exit']}; the load "
                  f"generator used {ld['client_cpu_share']:.2f} of a core", flush=True)
            for e in ld["errors"][:5]:
                print(f"   {e}", flush=True)
            if name == "pocket" and (ld["errors"] or ld["completed"] != ld["requests"]
                                      or row["exit"] != 0):
                failed = True
    print()
    print("| engine | clients x requests | errors | gen tok/s (load) | single stream tok/s | "
          "ratio | TTFT p50 / p99 (s) | latency p50 / p99 (s) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _ in engines:
        rs = [r for r in rows if r["engine"] == name]
        med = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731
        load_tps, single_tps = med(lambda r: r["load"]["tok_per_s"]), med(
            lambda r: r["single"]["tok_per_s"])
        print(f"| {name} | {a.clients} x {a.requests} | "
              f"{sum(len(r['load']['errors']) for r in rs)} | {load_tps:.1f} | "
              f"{single_tps:.1f} | {load_tps / single_tps:.2f}x | "
              f"{med(lambda r: r['load']['ttft_p50']):.3f} / {med(lambda r: r['load']['ttft_p99']):.3f} | "
              f"{med(lambda r: r['load']['latency_p50']):.2f} / {med(lambda r: r['load']['latency_p99']):.2f} | "
              f"{med(lambda r: r['peak_rss']) / 1e6:.0f} |")
    for r in rows:
        if r["engine"] == "pocket":
            # The KV budget: the slots' caches full, and the prompt cache's own budget.
            kv = r["kv_budget_bytes"] + r["prompt_cache_budget_bytes"]
            budget = model_bytes + kv + 200e6
            within = r["peak_rss"] <= budget
            print(f"pocket round {r['round']}: peak RSS {r['peak_rss'] / 1e6:.0f} MB, budget "
                  f"(model {model_bytes / 1e6:.0f} + KV {r['kv_budget_bytes'] / 1e6:.0f} + "
                  f"prompt cache {r['prompt_cache_budget_bytes'] / 1e6:.0f} + 200) "
                  f"{budget / 1e6:.0f} MB: {'within' if within else 'OVER'}; prefix hit ratio "
                  f"{r['prefix_hit_ratio']:.2f} (prompt cache: {r['load']['prompt_cache_hits']:.0f} "
                  f"requests under load, {r['prompt_cache_bytes'] / 1e6:.1f} MB held); "
                  f"under load: mean decode batch "
                  f"{r['load']['mean_batch']:.1f}, engine busy {r['load']['engine_prefill_s']:.1f} s "
                  f"prefill + {r['load']['engine_decode_s']:.1f} s decode of "
                  f"{r['load']['wall_s']:.1f} s")
            failed |= not within
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "rows": rows}, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
