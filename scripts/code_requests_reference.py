"""lm-eval 0.4.13's own generation requests for its code tasks, built by its task classes from
pocket's data files: `humaneval` and `mbpp` (plain text), `humaneval_instruct` and
`mbpp_instruct` (chat: built with apply_chat_template and fewshot_as_multiturn, lm-eval's
defaults for a chat run, through a chat template that records the messages and whether a
generation prompt is added, instead of rendering them). Only `datasets.load_dataset` is
redirected to pocket's files, and the `code_eval` metric (fetched from the Hub at import, unused
by requests) is stood in for.

Usage: code_requests_reference.py DATA_DIR FULL_OUT_DIR FIXTURE
  FULL_OUT_DIR/<task>.jsonl: every item's {"task_id", "context", "until", "max_gen_toks"};
    `context` is the text, or for the chat tasks {"messages", "add_generation_prompt"}
  FIXTURE: a sample (every 20th HumanEval problem, every 50th MBPP problem, for each task) with
    the problem itself, so the test runs without the data
"""
import json
import os
import sys
import types

import datasets

data_dir, full_out, fixture = sys.argv[1:4]


def jsonl(rel):
    with open(os.path.join(data_dir, rel), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


humaneval = jsonl("humaneval/HumanEval.jsonl")
mbpp = jsonl("mbpp/test.jsonl")
# MBPP in its Hugging Face columns (task_id an integer).
mbpp_rows = [{
    "task_id": int(p["task_id"].split("/")[1]),
    "text": p["text"],
    "code": p["canonical_solution"],
    "test_list": p["test_list"],
    "test_setup_code": p["test_setup_code"],
    "challenge_test_list": p["challenge_test_list"],
} for p in mbpp]


def load_dataset(path=None, name=None, **kwargs):
    if path == "openai/openai_humaneval":
        return datasets.DatasetDict({"test": datasets.Dataset.from_list(humaneval)})
    if path == "google-research-datasets/mbpp":
        return datasets.DatasetDict({"test": datasets.Dataset.from_list(mbpp_rows)})
    raise RuntimeError(f"no local copy of {path} {name}")


datasets.load_dataset = load_dataset


class _NoCodeEval:
    """The tasks' utils modules load Hugging Face's `code_eval` metric (from the Hub) at import
    and run it once; requests never use it, so it is stood in for here."""

    def compute(self, **kwargs):
        return [{"pass@1": 0.0}], {}


sys.modules["evaluate"] = types.SimpleNamespace(load=lambda name: _NoCodeEval())

from lm_eval.tasks import TaskManager, get_task_dict  # noqa: E402


def recording_template(messages, add_generation_prompt=True):
    return json.dumps({"messages": messages, "add_generation_prompt": add_generation_prompt})


names = ["humaneval", "humaneval_instruct", "mbpp", "mbpp_instruct"]
tasks = get_task_dict(names, TaskManager())
os.makedirs(full_out, exist_ok=True)
sample = []
for name in names:
    task = tasks[name]
    chat = name.endswith("_instruct")
    task.build_all_requests(rank=0, world_size=1, apply_chat_template=chat,
                            fewshot_as_multiturn=chat,
                            chat_template=recording_template if chat else None)
    problems = humaneval if name.startswith("humaneval") else mbpp
    assert len(task.instances) == len(problems), name
    rows = []
    for inst in sorted(task.instances, key=lambda i: i.doc_id):
        ctx, kwargs = inst.arguments
        row = {
            "task_id": problems[inst.doc_id]["task_id"],
            "context": json.loads(ctx) if chat else ctx,
            "until": kwargs["until"],
            "max_gen_toks": kwargs.get("max_gen_toks", 256),
        }
        rows.append(row)
        if inst.doc_id % (20 if name.startswith("humaneval") else 50) == 0:
            sample.append({"task": name, "problem": problems[inst.doc_id], **row})
    with open(os.path.join(full_out, name + ".jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{name}: {len(rows)} items", file=sys.stderr)
# mbpp_instruct's answer filter (utils.build_predictions) on responses of every shape: the
# fence closed or not, a language word or none, text around it, several blocks.
import importlib.util  # noqa: E402

import lm_eval.tasks  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "mbpp_utils", os.path.join(os.path.dirname(lm_eval.tasks.__file__), "mbpp", "utils.py"))
mbpp_utils = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mbpp_utils)

RESPONSES = [
    "def f(x):\n    return x\n```",
    "import math\ndef f(x):\n    return math.sqrt(x)\n```\nThis uses math.",
    "\ndef f(x):\n    return x\n```",
    "    return 1\n```",
    "def f(x):\n    return x",
    "",
    "```",
    "```python\nx = 1\n```",
    "Here it is:\n```python\ndef g():\n    pass\n```\nand\n```python\ny = 2\n```",
    "(lambda x: x)\n```",
    "# comment\nprint(1)\n```",
    "x = 1\n\n```\n\n```python\ny\n```",
    "\u00e9t\u00e9 = 1\n```",
    "def f():\n    s = '```'\n    return s\n```",
    "no fence at all\n\nreturn 3",
    "```python\nunclosed",
    "```py\nz = 3\n```",
    "\n\n```python\ncode\n```",
    "1 + 1\n```\n",
    "_private = 2\n```",
]
extracted = mbpp_utils.build_predictions([[r] for r in RESPONSES], [{} for _ in RESPONSES])
for r, [e] in zip(RESPONSES, extracted):
    sample.append({"task": "extract_code_blocks", "response": r, "extracted": e})
with open(fixture, "w", encoding="utf-8") as f:
    for r in sample:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print(f"{fixture}: {len(sample)} items", file=sys.stderr)
