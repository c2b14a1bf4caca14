"""Agreement of two `pocket eval ifeval|gsm8k --out FILE` runs of the same prompts (e.g. one
model with `--kv q8` and with `--kv f16`): how many greedy responses are identical, how far
into a differing response the two first part (characters, as a fraction of the shorter), and
the items whose prompt-level verdict flips. Items are matched by `key`; an item missing
from either file is counted and left out.

Usage: python3 scripts/compare_outputs.py A.jsonl B.jsonl [--show N]
"""
import argparse
import json
import statistics
import sys


def load(path):
    items = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            if "key" not in r or "response" not in r:
                sys.exit(f"{path}:{n}: no `key` or `response` field")
            items[r["key"]] = r
    return items


def verdict(r):
    s = r.get("scores", {})
    for k in ("prompt_level_strict_acc", "exact_match", "correct"):
        if k in s:
            return s[k]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--show", type=int, default=0, help="print the first N differing items")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    keys = sorted(set(a) & set(b), key=str)
    if not keys:
        sys.exit("no item is in both files")
    same = [k for k in keys if a[k]["response"] == b[k]["response"]]
    diverge = []
    for k in keys:
        x, y = a[k]["response"], b[k]["response"]
        if x == y:
            continue
        i = next((i for i, (c, d) in enumerate(zip(x, y)) if c != d), min(len(x), len(y)))
        diverge.append(i / max(1, min(len(x), len(y))))
    flips = [k for k in keys if verdict(a[k]) != verdict(b[k])]
    va = [verdict(a[k]) for k in keys if verdict(a[k]) is not None]
    vb = [verdict(b[k]) for k in keys if verdict(b[k]) is not None]
    print(f"items in both: {len(keys)} (only in A: {len(set(a) - set(b))}, "
          f"only in B: {len(set(b) - set(a))})")
    print(f"identical responses: {len(same)} ({len(same) / len(keys):.1%})")
    if diverge:
        print(f"differing responses part at a median {statistics.median(diverge):.0%} of the "
              f"shorter one")
    if va and vb:
        print(f"prompt-level accuracy: A {sum(va) / len(va):.4f}, B {sum(vb) / len(vb):.4f}")
    up = sum(1 for k in flips if verdict(b[k]) and not verdict(a[k]))
    print(f"verdict flips: {len(flips)} ({up} to pass in B, {len(flips) - up} to fail)")
    for k in [k for k in keys if a[k]["response"] != b[k]["response"]][: args.show]:
        print(f"\n--- {k}\nA: {a[k]['response'][:300]!r}\nB: {b[k]['response'][:300]!r}")


if __name__ == "__main__":
    main()
