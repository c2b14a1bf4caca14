"""How much of a multiple-choice score is the model's prior over the answer letters.

MMLU (and GPQA) score the log-likelihood of a bare letter (" A" ... " D") after the question. A
chat-tuned small model carries a strong preference for some letters whatever the question; this
script measures it from the per-item log-likelihoods a pocket run logs (`pocket eval mc ... --out`
or the suite's `--work` logs), without running a model:

- each letter's mean log-likelihood over the items, how often it is picked, how often it is gold;
- accuracy as scored (argmax of the log-likelihoods, which is lm-eval's `acc`);
- accuracy after contextual calibration: each letter's mean log-likelihood over the items is
  subtracted before the argmax (Zhao et al. 2021, "Calibrate Before Use", with the items' own
  mean standing in for a content-free input). This is not what lm-eval scores; it only says how
  many points the prior costs.

Usage: python3 scripts/mc_letter_prior.py LOG.jsonl [LOG.jsonl ...] [--per-subject N] [--json]
  --per-subject N   only items whose id is SUBJECT/k with k < N (MMLU's "first N per subject")
Standard library only.
"""
import argparse
import json
import sys


def read(path, per_subject):
    items = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                lls, gold = r["lls"], r["answer"]
            except (ValueError, KeyError) as e:
                sys.exit(f"{path}:{line_no}: not a multiple-choice log line ({e})")
            if per_subject is not None:
                k = str(r.get("id", "")).rsplit("/", 1)[-1]
                if not k.isdigit() or int(k) >= per_subject:
                    continue
            items.append((lls, gold))
    if not items:
        sys.exit(f"{path}: no items")
    widths = {len(lls) for lls, _ in items}
    if len(widths) != 1:
        sys.exit(f"{path}: items have different numbers of choices {sorted(widths)}")
    return items


def argmax(xs):
    return max(range(len(xs)), key=lambda i: xs[i])


def analyse(items):
    k = len(items[0][0])
    n = len(items)
    mean = [sum(lls[i] for lls, _ in items) / n for i in range(k)]
    picked = [0] * k
    gold = [0] * k
    right = right_cal = 0
    for lls, g in items:
        p = argmax(lls)
        c = argmax([x - m for x, m in zip(lls, mean)])
        picked[p] += 1
        gold[g] += 1
        right += p == g
        right_cal += c == g
    return {
        "n": n,
        "mean_ll": mean,
        "picked": picked,
        "gold": gold,
        "acc": 100 * right / n,
        "acc_calibrated": 100 * right_cal / n,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--per-subject", type=int)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {path: analyse(read(path, a.per_subject)) for path in a.logs}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for path, r in out.items():
        letters = "ABCDEFGHIJ"[: len(r["mean_ll"])]
        print(f"{path}: {r['n']} items")
        print("  letter  mean ll  picked  gold")
        for i, L in enumerate(letters):
            print(f"  {L:>6}  {r['mean_ll'][i]:7.3f}  {r['picked'][i]:6d}  {r['gold'][i]:4d}")
        print(f"  acc {r['acc']:.2f}   calibrated {r['acc_calibrated']:.2f}")


if __name__ == "__main__":
    main()
