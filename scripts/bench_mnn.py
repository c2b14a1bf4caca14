"""MNN's side of scripts/bench-vs-llamacpp.sh: the figures `pocket bench --json` prints, for an
MNN package (pocket's own export of the same weights), through MNN 3.6.1 from PyPI.

pp: one forward of P pseudo-random tokens into an empty context; tg: N single-token forwards
from an empty context; tg_depth: N single-token forwards after D tokens. MNN's defaults
otherwise (precision low, memory low: int8 activations), thread_num THREADS.

Usage: python bench_mnn.py PACKAGE_DIR P N D THREADS REPS [MEMORY=low]"""
import json
import os
import random
import resource
import sys
import time

from bench_figures import figure

import MNN.llm as llm


def main():
    path, p, n, d, threads, reps = sys.argv[1:7]
    memory = sys.argv[7] if len(sys.argv) > 7 else "low"
    p, n, d, threads, reps = int(p), int(n), int(d), int(threads), int(reps)
    t0 = time.perf_counter()
    m = llm.create(os.path.join(path, "config.json"))
    m.set_config({"thread_num": threads, "memory": memory, "sampler_type": "greedy",
                  "max_all_tokens": max(p, d + n, n) + 16})
    m.load()
    out = {"model": path, "load_s": time.perf_counter() - t0, "threads": threads,
           "memory": memory}
    rng = random.Random(0)
    # Ids below every vocabulary size we bench (the MNN-Pocket shape has 65,536).
    toks = lambda k: [rng.randrange(32000) for _ in range(k)]
    if p:
        secs = []
        for _ in range(reps):
            m.reset()
            ids = toks(p)
            t = time.perf_counter()
            m.forward(ids)
            secs.append(time.perf_counter() - t)
        out["pp"] = figure(p, secs)

    def decode(depth):
        secs = []
        for _ in range(reps):
            m.reset()
            if depth:
                m.forward(toks(depth))
            t = time.perf_counter()
            for tok in toks(n):
                m.forward([tok])
            secs.append(time.perf_counter() - t)
        return secs

    if n:
        out["tg"] = figure(n, decode(0))
    if n and d:
        out["tg_depth"] = figure(n, decode(d), d)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out), flush=True)
    # The wheel's LLM object crashes at interpreter exit, after the results are out.
    os._exit(0)


if __name__ == "__main__":
    main()
