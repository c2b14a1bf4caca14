"""Medians and ratios from the runs scripts/bench-vs-llamacpp.sh logged (one JSON per line)."""
import json
import statistics
import sys
from collections import defaultdict

FIGS = ["pp", "tg", "tg_depth"]
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
samples = defaultdict(list)  # (engine label, weights, fig) -> tok/s
for r in runs:
    label = r["engine"] if r["engine"] in ("pocket", "mnn") else f"llama.cpp fa={r['fa']}"
    for f in FIGS:
        if f in r["run"]:
            samples[(label, r["weights"], f)].append(r["run"][f]["tok_s_median"])
med = {k: statistics.median(v) for k, v in samples.items()}
W = max([6] + [len(r["weights"]) for r in runs])
print(f"{'engine':<16} {'weights':<{W}} " + " ".join(f"{f:>10}" for f in FIGS))
for (label, w) in sorted({(k[0], k[1]) for k in med}):
    print(f"{label:<16} {w:<{W}} " + " ".join(f"{med.get((label, w, f), float('nan')):>10.1f}" for f in FIGS))
print()
if "--same-file" in sys.argv:
    # GGUF mode: both engines ran the same file, named in `weights`.
    for w in sorted({k[1] for k in med}):
        ratios = []
        for f in FIGS:
            peer = max(med.get((f"llama.cpp fa={fa}", w, f), 0.0) for fa in (0, 1))
            mine = med.get(("pocket", w, f))
            ratios.append(f"{f} {mine / peer:.2f}x" if mine and peer else f"{f} -")
        print(f"pocket / llama.cpp (best flash-attention setting), {w}: " + ", ".join(ratios))
    print(f"({len(runs)} runs; medians over rounds)")
    sys.exit(0)
for q in ["q4", "q8"]:
    ratios = []
    for f in FIGS:
        peer = max(med.get((f"llama.cpp fa={fa}", f"{q}_0", f), 0.0) for fa in (0, 1))
        mine = med.get(("pocket", q, f))
        ratios.append(f"{f} {mine / peer:.2f}x" if mine and peer else f"{f} -")
    print(f"pocket {q} / llama.cpp {q}_0 (best flash-attention setting): " + ", ".join(ratios))
mnn = [med.get(("mnn", "q4", f)) for f in FIGS]
if any(mnn):
    mine = [med.get(("pocket", "q4", f)) for f in FIGS]
    print("pocket q4 / MNN 3.6.1 q4 (same int4 weights): " + ", ".join(
        f"{f} {a / b:.2f}x" if a and b else f"{f} -" for f, a, b in zip(FIGS, mine, mnn)))
print(f"({len(runs)} runs; medians over rounds)")
