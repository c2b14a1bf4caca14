#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers for a real checkpoint (default: the demo model
made by scripts/fetch-hf-models.sh), for tests/engine/real_model.rs.

Records, with f32 compute on the stored weights:
- greedy: for several chat prompts, the templated prompt ids and the first 32 greedy tokens
  (and the decoded answer);
- tokenize: ids from HF tokenizers for English, Chinese, code, emoji and mixed text;
- chat: a rendered multi-turn conversation and its ids;
- parameters: the stored parameter count.
Usage: hf_reference.py MODEL_DIR OUT.json
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = ["What is the capital of France?",
           "Write a Python function that returns the square of a number.",
           "Give me three tips for staying healthy.",
           "Translate 'good morning' into French.",
           "Explain in two sentences what a neural network is."]
TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?",
    "chinese": "你好，世界！今天天气很好，我们去公园散步吧。",
    "code": "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "emoji": "Launch 🚀🚀 party 🎉👩‍👩‍👧‍👦 and flags 🇫🇷 ok 👍🏽",
    "mixed": "  Numbers 1234567 and 3.14159, tabs\tand\n\nnewlines; café naïve Ωmega",
}
CHAT = [{"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is 2+2?"}]


def greedy_case(tok, model, prompt, ids, n=32):
    """The prompt's ids and its first `n` greedy tokens, with their text."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    gen = out[0, len(ids):].tolist()
    case = {"prompt": prompt, "prompt_ids": ids, "generated_ids": gen,
            "text": tok.decode(gen, skip_special_tokens=True)}
    print(repr(prompt), "->", repr(case["text"]), file=sys.stderr)
    return case


def main(model_dir, out_path):
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ref = {"model_dir": model_dir, "parameters": sum(p.numel() for p in model.parameters()),
           "greedy": [], "tokenize": {}, "chat": {}}
    for p in PROMPTS:
        msgs = [{"role": "user", "content": p}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        if not isinstance(ids, list):
            ids = ids["input_ids"]
        ref["greedy"].append(greedy_case(tok, model, p, ids))
    for k, t in TEXTS.items():
        ref["tokenize"][k] = {"text": t, "ids": tok.encode(t, add_special_tokens=False),
                              "ids_special": tok.encode(t, add_special_tokens=True)}
    rendered = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ref["chat"] = {"messages": CHAT, "rendered": rendered,
                   "ids": tok.encode(rendered, add_special_tokens=False)}
    with open(out_path, "w") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
