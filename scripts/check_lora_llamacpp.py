#!/usr/bin/env python3
"""A GGUF LoRA on a GGUF base, pocket against llama.cpp (llama-cpp-python 0.3.36 built from
source, `Llama(lora_path=...)`): perplexity over the same 2,048 tokens of a text (windows of
512) with the adapter and without it, and greedy answers (32 tokens) to held-out prompts from
the same prompt ids (how many are equal, and after how many tokens they part). Both run int8-ish kernels (pocket's int8 activations, llama.cpp's Q8_1
activations): the difference with the adapter is held to the difference without it, plus a
margin for the f32 adapter product each computes its own way.

Usage (the llama.cpp venv: scripts/llamacpp-venv.sh):
  check_lora_llamacpp.py POCKET BASE.gguf ADAPTER.gguf TEXT [PROMPTS.json]
"""
import json
import os
import sys
import tempfile

from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_gguf_llamacpp import CTX, N_TOKENS, llama_greedy, llama_ppl, pocket_json  # noqa: E402


def main():
    bin_, base, adapter, text_path = sys.argv[1:5]
    prompts = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else ["What is the capital of France?"]
    text = open(text_path).read()
    rows = {}
    for name, lora in [("base", None), ("adapter", adapter)]:
        kw = {"lora_path": lora} if lora else {}
        llm = Llama(model_path=base, n_ctx=CTX, logits_all=True, n_threads=2, verbose=False, **kw)
        toks = llm.tokenize(text.encode(), add_bos=False, special=False)[:N_TOKENS]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tf:
            json.dump(toks, tf)
        extra = ["--lora", lora] if lora else []
        ppl = pocket_json(bin_, "eval", "ppl", base, "--tokens", tf.name, "--ctx", str(CTX), "--json", *extra)
        ours = ppl["ppl"]
        theirs, _ = llama_ppl(llm, toks, ppl.get("bos_prefix"))
        same, agree = 0, []
        for p in prompts:
            r = pocket_json(bin_, "run", base, "-p", p, "--temp", "0", "-n", "32", "--json", *extra)
            ours_ids = r["generated_ids"]
            theirs_ids = llama_greedy(llm, r["prompt_ids"])[:len(ours_ids)]
            same += int(ours_ids == theirs_ids)
            k = 0
            while k < min(len(ours_ids), len(theirs_ids)) and ours_ids[k] == theirs_ids[k]:
                k += 1
            agree.append(k)
        rows[name] = {"ppl_pocket": ours, "ppl_llamacpp": theirs,
                      "diff_percent": 100 * abs(ours - theirs) / theirs, "greedy_equal": same,
                      "prompts": len(prompts), "mean_tokens_before_first_difference": sum(agree) / len(agree)}
        print(f"{name:8} ppl pocket {ours:.4f}  llama.cpp {theirs:.4f}  diff {rows[name]['diff_percent']:.3f} %  "
              f"greedy equal {same}/{len(prompts)}  first difference after {sum(agree) / len(agree):.1f} tokens",
              file=sys.stderr)
        del llm
    print(json.dumps(rows, indent=1))
    ok = rows["adapter"]["diff_percent"] <= rows["base"]["diff_percent"] + 0.5
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
