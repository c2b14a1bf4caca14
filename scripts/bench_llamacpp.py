"""llama.cpp's side of scripts/bench-vs-llamacpp.sh: the figures `pocket bench --json` prints,
measured the way llama-bench measures them, through the pinned llama-cpp-python (llama.cpp
compiled from source for this CPU).

pp: one batch of P pseudo-random tokens into an empty context; tg: N single-token decodes from
an empty context; tg_depth: N single-token decodes after D tokens already in the context.

pp_depth: the prefill of those D tokens (one sample per repetition).

Usage: python bench_llamacpp.py MODEL.gguf P N D THREADS REPS FLASH(0|1) [KV=f16|q8_0]"""
import json
import os
import random
import resource
import sys
import time

from bench_figures import figure

import llama_cpp


def main():
    path, p, n, d, threads, reps, flash = sys.argv[1:8]
    kv = sys.argv[8] if len(sys.argv) > 8 else "f16"
    kv_type = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}[kv]
    p, n, d, threads, reps, flash = int(p), int(n), int(d), int(threads), int(reps), flash == "1"
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=max(p, d + n, n) + 16, n_batch=max(p, d, 1),
                          n_ubatch=512, n_threads=threads, n_threads_batch=threads,
                          flash_attn=flash, verbose=False, logits_all=False,
                          type_k=kv_type, type_v=kv_type)
    load_s = time.perf_counter() - t0
    rng = random.Random(0)
    vocab = llm.n_vocab()
    toks = lambda k: [rng.randrange(vocab) for _ in range(k)]
    out = {"model": path, "load_s": load_s, "threads": threads, "flash_attn": flash, "kv": kv}
    if p:
        secs = []
        for _ in range(reps):
            llm.reset()  # eval() drops cached positions from n_tokens on
            ids = toks(p)
            t = time.perf_counter()
            llm.eval(ids)
            secs.append(time.perf_counter() - t)
        out["pp"] = figure(p, secs)
    if n:
        secs = []
        for _ in range(reps):
            llm.reset()  # eval() drops cached positions from n_tokens on
            t = time.perf_counter()
            for tok in toks(n):
                llm.eval([tok])
            secs.append(time.perf_counter() - t)
        out["tg"] = figure(n, secs)
    if n and d:
        secs, fill = [], []
        for _ in range(reps):
            llm.reset()  # eval() drops cached positions from n_tokens on
            t = time.perf_counter()
            llm.eval(toks(d))
            fill.append(time.perf_counter() - t)
            t = time.perf_counter()
            for tok in toks(n):
                llm.eval([tok])
            secs.append(time.perf_counter() - t)
        out["tg_depth"] = figure(n, secs, d)
        out["pp_depth"] = figure(d, fill)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
