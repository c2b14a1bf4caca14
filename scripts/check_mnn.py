"""pocket's MNN packages, run by MNN 3.6.1's own runtime (PyPI `MNN`), beside pocket.

Run through scripts/check-mnn.sh (it makes the venv and stubs MNN's telemetry module). Only
`MNN.llm` is imported, never `MNN.tools`. Each MNN run is a subprocess: the wheel's LLM object
crashes at interpreter exit, after the results are out.

  --fixtures : the tiny llama/qwen2/qwen3 checkpoints; first-step logits and 8 greedy tokens
               must equal pocket's exact path (f32 activations). Exit 1 otherwise (CI).
  default    : SmolLM2-135M-Instruct (3 chat prompts, 32 greedy tokens) and the MNN-Pocket-shape
               random checkpoint (first-step logits), with MNN's `normal` and `low` memory modes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
]


def decode(m, token):
    """A token's text; a token that ends inside a UTF-8 sequence cannot be decoded alone."""
    try:
        return m.tokenizer_decode(token)
    except UnicodeDecodeError:
        return "\ufffd"


def worker(args):
    """Inside the MNN venv: load one package, run the jobs, print one JSON line."""
    import numpy as np
    import MNN.llm as llm

    jobs = json.loads(args.jobs)
    m = llm.create(os.path.join(args.package, "config.json"))
    m.set_config({"sampler_type": "greedy", "memory": args.memory, "thread_num": 2,
                  "max_new_tokens": 64})
    m.load()
    out = []
    for job in jobs:
        r = {}
        if job.get("texts"):
            r["encoded_texts"] = [[int(i) for i in m.tokenizer_encode(t)] for t in job["texts"]]
        if job.get("prompt") is not None:
            text = m.apply_chat_template(job["prompt"])
            r["template"] = text
            r["encoded"] = [int(i) for i in m.tokenizer_encode(text)]
        ids = job["ids"]
        if job.get("logits"):
            m.reset()
            r["logits"] = np.array(m.forward(ids).read(), dtype=np.float64).reshape(-1).tolist()
        m.reset()
        gen = [int(t) for t in m._c_obj.generate(ids, job["n"])]
        r["generated"] = gen
        r["text"] = "".join(decode(m, t) for t in gen)
        out.append(r)
    print(json.dumps(out), flush=True)
    os._exit(0)


def run_mnn(package, memory, jobs):
    cmd = [sys.executable, __file__, "--worker", "--package", package, "--memory", memory,
           "--jobs", json.dumps(jobs)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("[")]
    if not lines:
        sys.exit(f"MNN failed on {package} ({memory}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


def pocket(bin_, *args, env=None):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([bin_, *args], capture_output=True, text=True, env=e)
    if p.returncode != 0:
        sys.exit(f"pocket {' '.join(args)} failed:\n{p.stderr}")
    return p.stdout


EXACT = {"POCKET_ACT": "f32", "POCKET_KV": "f32"}


def pocket_run(bin_, model, ids=None, prompt=None, n=8, logits=False, env=None):
    args = ["run", model, "--json", "-n", str(n), "--temp", "0", "-t", "2"]
    args += ["--prompt-ids", ",".join(map(str, ids))] if ids is not None else ["-p", prompt]
    if logits:
        args.append("--first-logits")
    return json.loads(pocket(bin_, *args, env=env))


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


def argmax(v):
    return max(range(len(v)), key=v.__getitem__)


def export(bin_, src, pocket_out, mnn_out, quant_args=()):
    if pocket_out and not os.path.exists(pocket_out):
        pocket(bin_, "export", src, "-o", pocket_out, *quant_args)
    t = time.perf_counter()
    rep = json.loads(pocket(bin_, "export", pocket_out or src, "--format", "mnn", "-o", mnn_out,
                            "--json"))
    return rep, time.perf_counter() - t


def fixtures(args):
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["llama-tiny", "qwen2-tiny", "qwen3-tiny"]:
            src = os.path.join("fixtures/tiny", name)
            q4 = os.path.join(tmp, name + ".pocket")
            pkg = os.path.join(tmp, name)
            export(args.pocket, src, q4, pkg)
            ref = json.load(open(os.path.join(src, "reference.json")))
            ids = ref["greedy"][0]["prompt_ids"]
            mine = pocket_run(args.pocket, q4, ids=ids, n=8, logits=True, env=EXACT)
            texts = [t["text"] for t in ref["tokenize"]]
            theirs = run_mnn(pkg, "normal", [{"ids": ids, "n": 8, "logits": True,
                                              "texts": texts}])[0]
            # MNN's tokenizer (from our tokenizer.mtok) against transformers' ids.
            tok_ok = sum(a == t["ids_special"] for a, t in zip(theirs["encoded_texts"], ref["tokenize"]))
            d = max_diff(mine["first_logits"], theirs["logits"])
            # MNN counts the end-of-sequence token it stops on; pocket does not.
            same = theirs["generated"][:len(mine["generated_ids"])] == mine["generated_ids"]
            good = d < 1e-3 and same and tok_ok == len(texts)
            ok &= good
            print(f"{name:11s} logits max|diff| {d:.2e}  tokens pocket {mine['generated_ids']} "
                  f"MNN {theirs['generated']}  texts tokenized as transformers does: "
                  f"{tok_ok}/{len(texts)}  {'ok' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


def full(args):
    work = args.work
    os.makedirs(work, exist_ok=True)
    summary = {}

    # SmolLM2-135M-Instruct (llama): chat prompts through MNN's own tokenizer and template.
    smol_q4 = os.path.join(work, "smollm2-q4.pocket")
    smol = os.path.join(work, "smollm2-mnn")
    rep, secs = export(args.pocket, args.smollm2, smol_q4, smol)
    print(f"SmolLM2: {smol} ({rep['report']['total_bytes'] / 1e6:.2f} MB) written in {secs:.2f} s")
    runs = {}
    for label, env in [("pocket", None), ("pocket-exact", EXACT)]:
        runs[label] = [pocket_run(args.pocket, smol_q4, prompt=p, n=32, env=env) for p in PROMPTS]
    jobs = [{"prompt": p, "ids": r["prompt_ids"], "n": 32}
            for p, r in zip(PROMPTS, runs["pocket"])]
    for mem in ["normal", "low"]:
        runs["mnn-" + mem] = run_mnn(smol, mem, jobs)
    agree = {k: 0 for k in ["pocket", "pocket-exact"]}
    for i, p in enumerate(PROMPTS):
        print(f"\n== {p}")
        same_prompt = runs["mnn-normal"][i]["encoded"] == runs["pocket"][i]["prompt_ids"]
        print(f"   MNN's tokenizer + template give pocket's {len(runs['pocket'][i]['prompt_ids'])}"
              f" prompt ids: {same_prompt}")
        for label in ["pocket", "pocket-exact", "mnn-normal", "mnn-low"]:
            r = runs[label][i]
            ids = r.get("generated_ids", r.get("generated"))
            text = r["text"].replace("\n", "\\n")
            print(f"   {label:13s} {ids[:8]}  {text[:100]!r}")
        first8 = runs["mnn-normal"][i]["generated"][:8]
        for k in agree:
            mine = runs[k][i]["generated_ids"]
            n = min(8, len(mine))
            agree[k] += first8[:n] == mine[:n]
    paris = "Paris" in runs["mnn-normal"][0]["text"]
    print(f"\nMNN (normal) names Paris: {paris}; first 8 greedy tokens equal to pocket's on "
          f"{agree['pocket']}/3 prompts (default int8 path), {agree['pocket-exact']}/3 (exact path)")
    summary["smollm2"] = {"paris": paris, "agree_first8": agree, "export_s": secs,
                          "bytes": rep["report"]["total_bytes"]}

    # The MNN-Pocket-shape random checkpoint (qwen3): first-step logits.
    shape_q4 = args.shape_pocket
    shape = os.path.join(work, "mnn-pocket-shape-mnn")
    rep, secs = export(args.pocket, None, shape_q4, shape)
    mb = rep["report"]["total_bytes"] / 1e6
    print(f"\nMNN-Pocket shape: {shape} = {mb:.2f} MB (MNN's own export: 173.0 MB), "
          f"written in {secs:.2f} s (pocket reports {rep['seconds']:.2f} s)")
    ids = [1, 500, 9000, 20, 65000, 777, 4242, 31337, 12, 99]
    mine = pocket_run(args.pocket, shape_q4, ids=ids, n=8, logits=True, env=EXACT)
    fast = pocket_run(args.pocket, shape_q4, ids=ids, n=8, logits=True)
    res = {}
    for mem in ["normal", "low"]:
        r = run_mnn(shape, mem, [{"ids": ids, "n": 8, "logits": True}])[0]
        res[mem] = {
            "max_abs_diff_vs_pocket_exact": max_diff(r["logits"], mine["first_logits"]),
            "max_abs_diff_vs_pocket_default": max_diff(r["logits"], fast["first_logits"]),
            "argmax_equal": argmax(r["logits"]) == argmax(mine["first_logits"]),
            "tokens": r["generated"],
        }
        print(f"   MNN {mem:6s}: first-step logits max|diff| {res[mem]['max_abs_diff_vs_pocket_exact']:.2e} "
              f"vs pocket exact, {res[mem]['max_abs_diff_vs_pocket_default']:.2e} vs pocket default; "
              f"tokens {r['generated']}")
    print(f"   pocket exact tokens {mine['generated_ids']}, default {fast['generated_ids']}")
    summary["mnn_pocket_shape"] = {"bytes": rep["report"]["total_bytes"], "export_s": secs,
                                   "mnn": res}
    print("\n" + json.dumps(summary))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--package")
    ap.add_argument("--memory", default="normal")
    ap.add_argument("--jobs")
    ap.add_argument("--fixtures", action="store_true")
    ap.add_argument("--pocket", default="target/release/pocket")
    ap.add_argument("--smollm2", default="models/smollm2-135m-instruct")
    ap.add_argument("--shape-pocket", default="models/bench/q4.pocket")
    ap.add_argument("--work", default="models/mnn")
    args = ap.parse_args()
    if args.worker:
        worker(args)
    elif args.fixtures:
        fixtures(args)
    else:
        full(args)


if __name__ == "__main__":
    main()
