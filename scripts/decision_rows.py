#!/usr/bin/env python3
"""Multiple-choice benchmarks as System One decision rows, for `pocket eval decide` and
`pocket decide fit` (standard library only).

Each item becomes one `choice` question: the question is the state, the options are its
letters with the answer texts as their descriptions, gold is the right letter:

  {"id", "state": QUESTION, "question": {"type": "choice", "instructions": "Which option
   answers this question about SUBJECT correctly?", "criteria": {"A": TEXT, ...}}, "gold": "B"}

Reads scripts/fetch-eval-data.sh's data/ layout.

Usage: scripts/decision_rows.py mmlu|mmlu_dev|arc_challenge [--data-dir data] > rows.jsonl
"""
import argparse
import json
import os
import sys

LETTERS = "ABCDEFGHIJ"


def row(rid, question, choices, gold, subject=None):
    about = f" about {subject.replace('_', ' ')}" if subject else ""
    return {"id": rid, "state": question.strip(), "gold": LETTERS[gold],
            "question": {"type": "choice",
                         "instructions": f"Which option answers this question{about} correctly?",
                         "criteria": {LETTERS[i]: c for i, c in enumerate(choices)}}}


def mmlu(path):
    index = {}
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            n = index.get(d["subject"], 0)
            index[d["subject"]] = n + 1
            yield row(f"{d['subject']}/{n}", d["question"], d["choices"], d["answer"], d["subject"])


def arc(path):
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            labels = d["choices"]["label"]
            yield row(d["id"], d["question"], d["choices"]["text"], labels.index(d["answerKey"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("task", choices=["mmlu", "mmlu_dev", "arc_challenge"])
    ap.add_argument("--data-dir", default="data")
    a = ap.parse_args()
    rows = {
        "mmlu": lambda: mmlu(os.path.join(a.data_dir, "mmlu/test.jsonl")),
        "mmlu_dev": lambda: mmlu(os.path.join(a.data_dir, "mmlu/dev.jsonl")),
        "arc_challenge": lambda: arc(os.path.join(a.data_dir, "arc_challenge/test.jsonl")),
    }[a.task]()
    for r in rows:
        sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
