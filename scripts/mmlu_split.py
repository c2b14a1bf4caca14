"""Runs MMLU a few subjects at a time, across processes or sessions, and joins the parts.

The whole of MMLU (57 subjects, 14,042 questions, 5-shot) takes this machine about three hours
per build on one thread, more than a session has when two builds are compared. Questions are
scored independently and an MMLU id is SUBJECT/k (k counts within the subject in the data's
order), so a subject run on its own gives the same ids and the same log-likelihoods as the same
subject inside a whole run (the model's context is the subject's five dev examples and the
question, nothing else). The unit of work here is the whole subject:

  done LOG_A LOG_B -o DIR
      Writes DIR/mmlu.A.jsonl and DIR/mmlu.B.jsonl: the compact form (scripts/compact_run_log.py)
      of each run's items, restricted to the subjects that are whole in that run (a subject cut
      off mid-way is dropped, to be run whole later). Items already in DIR's files are kept
      (joined by id; an id seen again must have the same scores), so parts accumulate.
  rest DIR --side A|B --data data -o OUT
      Writes OUT/mmlu/{dev,test}.jsonl: the data of the subjects not yet whole in DIR's file for
      that side, for `pocket eval mc MODEL --task mmlu --data-dir OUT` (or the suite's
      --data-dir).

`pocket eval compare DIR/mmlu.A.jsonl DIR/mmlu.B.jsonl` gives the paired table of the subjects
both sides have (it leaves the others out and says how many).
Standard library only.
"""
import argparse
import collections
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compact_run_log import compact  # noqa: E402


def subject_sizes(data):
    sizes = collections.Counter()
    with open(os.path.join(data, "mmlu", "test.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                sizes[json.loads(line)["subject"]] += 1
    return sizes


def subject(record):
    return str(record["id"]).rsplit("/", 1)[0]


def whole(records, sizes):
    got = collections.Counter(subject(r) for r in records)
    return {s for s, n in sizes.items() if got[s] == n}


def write(path, records):
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def done(a):
    sizes = subject_sizes(a.data)
    os.makedirs(a.out, exist_ok=True)
    kept = {}
    for side, log in (("A", a.log_a), ("B", a.log_b)):
        prev = os.path.join(a.out, f"mmlu.{side}.jsonl")
        kept[side] = compact(([prev] if os.path.exists(prev) else []) + [log], dedupe=True)
    for side, records in kept.items():
        full = whole(records, sizes)
        records = [r for r in records if subject(r) in full]
        write(os.path.join(a.out, f"mmlu.{side}.jsonl"), records)
        print(f"{a.out}/mmlu.{side}.jsonl: {len(records)} items, {len(full)} of {len(sizes)} subjects",
              file=sys.stderr)


def rest(a):
    sizes = subject_sizes(a.data)
    path = os.path.join(a.dir, f"mmlu.{a.side}.jsonl")
    have = whole(compact([path]), sizes) if os.path.exists(path) else set()
    out = os.path.join(a.out, "mmlu")
    os.makedirs(out, exist_ok=True)
    n = 0
    with open(os.path.join(a.data, "mmlu", "test.jsonl"), encoding="utf-8") as f, \
            open(os.path.join(out, "test.jsonl"), "w", encoding="utf-8") as g:
        for line in f:
            if line.strip() and json.loads(line)["subject"] not in have:
                g.write(line if line.endswith("\n") else line + "\n")
                n += 1
    shutil.copyfile(os.path.join(a.data, "mmlu", "dev.jsonl"), os.path.join(out, "dev.jsonl"))
    print(f"{out}/test.jsonl: {n} questions in {len(sizes) - len(have)} subjects not yet done",
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("done")
    d.add_argument("log_a")
    d.add_argument("log_b")
    d.add_argument("-o", "--out", required=True)
    d.add_argument("--data", default="data")
    r = sub.add_parser("rest")
    r.add_argument("dir")
    r.add_argument("--side", choices=("A", "B"), required=True)
    r.add_argument("-o", "--out", required=True)
    r.add_argument("--data", default="data")
    a = ap.parse_args()
    done(a) if a.cmd == "done" else rest(a)


if __name__ == "__main__":
    main()
