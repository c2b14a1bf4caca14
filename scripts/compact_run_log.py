"""Shrinks pocket results logs to what `pocket eval compare` pairs on: task, model, id, scores.

A `--work`/`--out` log line carries the item's data (an MMLU context is about 1.6 kB, a BBH
question and its answer more) so that a resumed run can check the data has not changed. To keep
the evidence behind a drift table in git without committing data sets, docs/runs/ holds the
compact form: no question text, no context, no answer text, only each item's id and scores.
`pocket eval compare A.jsonl B.jsonl` reads these exactly as it reads the full logs (items are
paired by id), so a table in docs/evals.md can be checked, and a run split over several sessions
or processes (subjects or tasks run apart) can be joined by concatenating its compact logs.

Usage: python3 scripts/compact_run_log.py IN.jsonl [IN.jsonl ...] -o OUT.jsonl
  Several inputs are joined in the order given; every line must have the same task and model,
  and an id may appear only once. A torn last line (a run killed mid-write) is skipped, as
  pocket's own readers skip it. Standard library only.
"""
import argparse
import json
import os
import sys

KEEP = ("task", "model", "id", "scores")


def compact(paths, dedupe=False):
    """The compact records of `paths`, joined. With `dedupe`, an id seen again is skipped if its
    scores are the same (a part joined twice) and refused if they differ."""
    out, seen, who = [], {}, None
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                if n == len(lines):  # torn last line: no newline after it
                    break
                sys.exit(f"{path}:{n}: not JSON ({e})")
            missing = [k for k in KEEP if k not in r]
            if missing:
                sys.exit(f"{path}:{n}: no {', '.join(missing)} (not a pocket results log?)")
            if who is None:
                who = (r["task"], r["model"])
            elif (r["task"], r["model"]) != who:
                sys.exit(f"{path}:{n}: task/model {r['task']}/{r['model']}, earlier {who[0]}/{who[1]}")
            key = json.dumps(r["id"])
            if key in seen:
                if dedupe and seen[key] == r["scores"]:
                    continue
                sys.exit(f"{path}:{n}: id {key} appears twice" + (" with other scores" if dedupe else ""))
            seen[key] = r["scores"]
            out.append({k: r[k] for k in KEEP})
    if not out:
        sys.exit("no items in " + ", ".join(paths))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    records = compact(a.logs)
    tmp = a.out + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(records)} items", file=sys.stderr)


if __name__ == "__main__":
    main()
