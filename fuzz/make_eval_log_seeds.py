#!/usr/bin/env python3
"""Writes the `eval_logs` fuzz target's seeds (fuzz/seeds/eval_logs/): parts' results logs
of real runs on the tiny fixtures (`pocket eval … --shard K/N --out`), joined by 0xFF bytes as
`fuzz/src/inputs.rs`'s `split_logs` reads them, and a few broken joins (a missing part, an
item in two logs, parts of different runs, a torn last line, a forged item count).
Usage: python3 fuzz/make_eval_log_seeds.py [path/to/pocket]
"""
import json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds", "eval_logs")
POCKET = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "pocket")
FIX = os.path.join(ROOT, "evals", "tests", "fixtures")
TINY = os.path.join(ROOT, "fixtures", "tiny")


def parts(work, name, task, n):
    logs = []
    for k in range(1, n + 1):
        out = os.path.join(work, f"{name}-{k}.jsonl")
        subprocess.run([POCKET, "eval", *task, "--shard", f"{k}/{n}", "--out", out, "--json"],
                       check=True, stdout=subprocess.DEVNULL)
        logs.append(open(out, "rb").read())
    return logs


def put(name, logs):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(b"\xff".join(logs))


def main():
    work = tempfile.mkdtemp()
    gsm = parts(work, "gsm8k", ["gsm8k", os.path.join(TINY, "qwen2-tiny"), "--variant",
                                "gsm8k_cot", "--data", os.path.join(FIX, "gsm8k_sample.jsonl")], 2)
    ife = parts(work, "ifeval", ["ifeval", os.path.join(TINY, "qwen3-tiny"), "--data",
                                 os.path.join(FIX, "ifeval_input_data.jsonl"), "--limit", "3"], 3)
    mc = parts(work, "mc", ["mc", os.path.join(TINY, "llama-tiny"), "--data",
                            os.path.join(FIX, "mc_sample.jsonl")], 2)
    put("gsm8k-2-parts", gsm)
    put("ifeval-3-parts", ife)
    put("mc-2-parts", mc)
    put("missing-part", gsm[:1])
    put("doubled-item", [gsm[0], gsm[1] + gsm[0]])
    put("different-runs", [gsm[0], mc[1]])
    put("torn-line", [gsm[0], gsm[1][:-20]])
    forged = []
    for log in gsm:
        records = [json.loads(line) for line in log.decode().splitlines()]
        for r in records:
            r["shard"]["of"] = 2**62
            r["shard"]["part"] = r["shard"]["part"].split("/")[0] + f"/{2**62}"
        forged.append("\n".join(json.dumps(r) for r in records).encode() + b"\n")
    put("forged-count", forged)


if __name__ == "__main__":
    main()
