#!/usr/bin/env python3
"""The Python reference for pocket's GSM8K port: runs lm-evaluation-harness 0.4.13's own code
on synthetic responses and writes what it decides.

  verdicts: for every row of evals/tests/fixtures/gsm8k_completions.jsonl, the task's filter
            pipelines (RegexFilter + take_first from the yaml's filter_list, built by the
            harness's build_filter_ensemble) and its process_results (exact_match with the yaml's
            ignore_case / regexes_to_ignore), through a ConfigurableTask made from the yaml.
  prompts:  fewshot_context() for a few questions per variant (plain text, and for
            gsm8k_cot_llama the chat messages the harness sends with --apply_chat_template
            --fewshot_as_multiturn).

Environment (scripts/make-gsm8k-reference.sh builds it): a venv with
  pip install --no-deps lm-eval==0.4.13 ; pip install numpy pyyaml jinja2 dill tqdm typing_extensions
lm-eval's full dependency tree (torch, datasets, transformers, ...) is not needed for this:
the modules the code paths above never use (sacrebleu, datasets, requests) are stubbed.

Usage: python scripts/gsm8k_reference.py COMPLETIONS.jsonl VERDICTS_OUT.jsonl PROMPTS_OUT.jsonl
"""
import json
import os
import sys
import types

for _name in ["sacrebleu", "datasets", "requests"]:
    sys.modules[_name] = types.ModuleType(_name)
sys.modules["datasets"].Dataset = type("Dataset", (), {})
sys.modules["datasets"].DownloadMode = type("DownloadMode", (), {})

import yaml  # noqa: E402
import lm_eval  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.task import ConfigurableTask  # noqa: E402

YAMLS = {
    "gsm8k": "gsm8k.yaml",
    "gsm8k_cot": "gsm8k-cot.yaml",
    "gsm8k_cot_zeroshot": "gsm8k-cot-zeroshot.yaml",
    "gsm8k_cot_llama": "gsm8k-cot-llama.yaml",
}
TASK_DIR = os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "gsm8k")

# Questions for the prompt check (GSM8K-like, with the characters prompts must carry through).
QUESTIONS = [
    "Janet\u2019s ducks lay 16 eggs per day. How much in dollars does she make every day?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber.\nHow many bolts in total?",
    "What is {{ 3 + 4 }} and $5?  ",
]


class Docs(list):
    """What ConfigurableTask reads from a datasets.Dataset: the rows and their features."""

    features = {"question": None, "answer": None}


def default_train_docs(cot_yaml):
    """pocket's default exemplars for plain gsm8k (there is no train split here): gsm8k_cot's
    exemplars with "The answer is N." rewritten as the train split's "\\n#### N"."""
    docs = []
    for s in cot_yaml["fewshot_config"]["samples"]:
        body, number = s["target"].rsplit(" The answer is ", 1)
        docs.append({"question": s["question"], "answer": body + "\n#### " + number.rstrip(".")})
    return Docs(docs)


def make_task(variant, test_docs, train_docs):
    with open(os.path.join(TASK_DIR, YAMLS[variant])) as f:
        config = yaml.safe_load(f)
    if variant == "gsm8k":
        # The harness samples the train split at random; pocket takes the first rows.
        config["fewshot_config"] = {"sampler": "first_n"}

    class Task(ConfigurableTask):
        def download(self, dataset_kwargs=None, **kwargs):
            self.dataset = {"test": Docs(test_docs), "train": train_docs}

    return Task(config=config)


def verdicts(rows, train_docs):
    out = []
    by_variant = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(r)
    for variant, vrows in by_variant.items():
        docs = [{"question": "q", "answer": r["answer"]} for r in vrows]
        task = make_task(variant, docs, train_docs)
        instances = []
        for r, doc in zip(vrows, docs):
            inst = Instance(request_type="generate_until", doc=doc, arguments=("", {}), idx=0)
            inst.resps = [r["response"]]
            instances.append(inst)
        for f in task._filters:
            f.apply(instances)
        for r, doc, inst in zip(vrows, docs, instances):
            row = {"id": r["id"]}
            for key, short in [("strict-match", "strict"), ("flexible-extract", "flexible")]:
                (filtered,) = [inst.filtered_resps[key]]
                scores = task.process_results(doc, [filtered])
                row[short] = filtered
                row[short + "_exact_match"] = scores["exact_match"]
            out.append(row)
    out.sort(key=lambda r: r["id"])
    return out


def prompts(train_docs):
    out = []
    for variant in YAMLS:
        docs = [{"question": q, "answer": "#### 1"} for q in QUESTIONS]
        task = make_task(variant, docs, train_docs)
        n = task.config.num_fewshot
        for doc in docs:
            row = {"variant": variant, "question": doc["question"]}
            if variant == "gsm8k_cot_llama":
                row["messages"] = json.loads(task.fewshot_context(
                    doc, n, apply_chat_template=True, fewshot_as_multiturn=True,
                    chat_template=lambda msgs, add_generation_prompt=True: json.dumps(msgs)))
            row["text"] = task.fewshot_context(doc, n)
            row["until"] = task.config.generation_kwargs["until"]
            out.append(row)
    return out


def main():
    completions, verdicts_out, prompts_out = sys.argv[1:4]
    with open(os.path.join(TASK_DIR, YAMLS["gsm8k_cot"])) as f:
        train_docs = default_train_docs(yaml.safe_load(f))
    with open(completions, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(verdicts_out, "w", encoding="utf-8") as f:
        for row in verdicts(rows, train_docs):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(prompts_out, "w", encoding="utf-8") as f:
        for row in prompts(train_docs):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} verdict rows, lm-eval {lm_eval.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
