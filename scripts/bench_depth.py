"""Decode and prefill at depth (issue #24): pocket with an f16 and an int8 (q8) KV cache against
llama.cpp with q8_0 K and V and flash attention, on the same Q4_0 GGUF (the MNN-Pocket shape),
engines alternating in every round, medians over rounds.

For each depth D: the prefill of D tokens (chunks of 512 in both engines), then N decode steps
after them. Prints a table (tok/s, ratios, bytes read per decode step and the fraction of the
machine's read bandwidth they reach, peak RSS) and writes the runs to models/bench/runs-depth.jsonl.
`--plot FILE.png` draws the depth curves (needs matplotlib: scripts/bench-depth.sh makes a venv).

Usage: python3 scripts/bench_depth.py MODEL.gguf [--depths 4096,16384,32000] [--rounds 3]
       [--n 64] [--reps 5] [--threads 2] [--bandwidth 25e9] [--llamacpp-python PATH] [--plot FILE.png]
       [--engines pocket-f16,pocket-q8,llama.cpp-q8_0] [--log FILE.jsonl (appended)]
       [--table FILE.jsonl[,FILE.jsonl...] (print the table of earlier runs, run nothing)]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = ["pocket-f16", "pocket-q8", "llama.cpp-q8_0"]


def run(engine, model, depth, n, threads, py, reps):
    if engine.startswith("pocket"):
        kv = engine.split("-")[1]
        # The decode reps share one prefill (bench truncates back to the depth between them).
        cmd = [os.path.join(ROOT, "target/release/pocket"), "bench", model, "--pp", "0", "-n",
               str(n), "--depth", str(depth), "-t", str(threads), "--reps", str(reps), "--json",
               "--kv", kv]
    else:
        kv = engine.split("-")[1]
        cmd = [py, os.path.join(ROOT, "scripts/bench_llamacpp.py"), model, "0", str(n),
               str(depth), str(threads), "1", "1", kv]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def table(runs, bandwidth):
    depths = sorted({r["depth"] for r in runs})
    med = lambda e, d, key: statistics.median(
        r["run"][key]["tok_s_median"] for r in runs if r["engine"] == e and r["depth"] == d)
    rss = lambda e, d: statistics.median(
        r["run"]["peak_rss_bytes"] for r in runs if r["engine"] == e and r["depth"] == d)
    rows = []
    print("| depth | engine | decode tok/s | prefill tok/s | bytes/step | of bandwidth | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for d in depths:
        p16 = [r["run"] for r in runs if r["engine"] == "pocket-f16" and r["depth"] == d]
        q8 = [r["run"] for r in runs if r["engine"] == "pocket-q8" and r["depth"] == d]
        # Bytes a step reads: pocket reports its own; llama.cpp's are the same weights and a
        # q8_0 cache (34 bytes per 32 elements), counted from pocket's f16 cache.
        step = {}
        if p16:
            step["pocket-f16"] = p16[0]["step_bytes_at_depth"]
            weights = p16[0]["step_bytes_at_depth"] - p16[0]["kv_bytes"]
            step["llama.cpp-q8_0"] = weights + p16[0]["kv_bytes"] // 2 * 34 // 32
        if q8:
            step["pocket-q8"] = q8[0]["step_bytes_at_depth"]
        for e in ENGINES:
            if not any(r["engine"] == e and r["depth"] == d for r in runs):
                continue
            tg, pp = med(e, d, "tg_depth"), med(e, d, "pp_depth")
            b = step.get(e)
            frac = f"{b * tg / bandwidth:.0%}" if b else "–"
            mb = f"{b / 1e6:.0f} MB" if b else "–"
            print(f"| {d} | {e} | {tg:.1f} | {pp:.1f} | {mb} | {frac} | {rss(e, d) / 1e6:.0f} MB |")
            rows.append({"depth": d, "engine": e, "tg": tg, "pp": pp, "step_bytes": b})
    print()
    for d in depths:
        try:
            f16, q8, lc = (med(e, d, "tg_depth") for e in ENGINES)
            pf16, pq8, plc = (med(e, d, "pp_depth") for e in ENGINES)
        except statistics.StatisticsError:
            continue
        print(f"depth {d}: decode q8/f16 {q8 / f16:.2f}x, q8/llama.cpp {q8 / lc:.2f}x; "
              f"prefill q8/llama.cpp {pq8 / plc:.2f}x, f16/llama.cpp {pf16 / plc:.2f}x")
    return rows


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in [(axes[0], "tg", "decode after D tokens"),
                           (axes[1], "pp", "prefill of D tokens")]:
        for e in ENGINES:
            pts = sorted((r["depth"], r[key]) for r in rows if r["engine"] == e)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=e)
        ax.set_xlabel("context depth D (tokens)")
        ax.set_ylabel("tok/s")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("MNN-Pocket shape, Q4_0, 2 threads (medians; docs/performance.md)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--depths", default="4096,16384,32000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5,
                    help="pocket's decode repetitions after each prefill (the median is taken)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bandwidth", type=float, default=25e9)
    ap.add_argument("--llamacpp-python", default=os.path.join(ROOT, ".venv-llamacpp/bin/python"))
    ap.add_argument("--plot")
    ap.add_argument("--table")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--log", default=os.path.join(ROOT, "models/bench/runs-depth.jsonl"))
    a = ap.parse_args()
    engines = a.engines.split(",")
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        sys.exit(f"--engines: unknown {', '.join(unknown)}; expected some of {', '.join(ENGINES)}")
    if a.table:
        runs = [json.loads(l) for t in a.table.split(",") for l in open(t) if l.strip()]
    else:
        if not a.model:
            sys.exit("give MODEL.gguf (or --table FILE)")
        log = a.log
        os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
        runs = []
        # Appended, so runs of some depths or engines can be tabled with earlier ones.
        with open(log, "a") as f:
            for rnd in range(a.rounds):
                for d in (int(x) for x in a.depths.split(",")):
                    # Alternate the engines' order every round.
                    order = engines if rnd % 2 == 0 else engines[::-1]
                    for e in order:
                        print(f"round {rnd + 1}/{a.rounds} depth {d} {e}", file=sys.stderr)
                        r = {"engine": e, "depth": d, "round": rnd,
                             "run": run(e, a.model, d, a.n, a.threads, a.llamacpp_python,
                                        a.reps)}
                        runs.append(r)
                        f.write(json.dumps(r) + "\n")
                        f.flush()
    rows = table(runs, a.bandwidth)
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
