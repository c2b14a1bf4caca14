#!/usr/bin/env python3
"""Convert a llama-architecture GGUF into a Hugging Face checkpoint with transformers.

transformers dequantizes the GGUF fully; we save bf16 weights with tied embeddings. Two
fixes make the result faithful to the original model:
- transformers maps `tokenizer.ggml.pre = "smollm"` to a plain ByteLevel pre-tokenizer, but
  SmolLM2's real tokenizer splits every digit first (as llama.cpp does):
  Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false)].
- the chat template and special tokens are carried over from the GGUF metadata.
Usage: gguf_to_hf.py MODEL.gguf OUT_DIR
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(gguf_path, out):
    d, name = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    # A model loaded from GGUF is marked quantized and refuses to save: copy the dequantized
    # weights into a plain model of the same config.
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    cfg.tie_word_embeddings = True
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"weights do not fit the config: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    plain.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)

    with open(os.path.join(out, "tokenizer.json")) as f:
        tj = json.load(f)
    pre = tj.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":
        tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
        with open(os.path.join(out, "tokenizer.json"), "w") as f:
            json.dump(tj, f, ensure_ascii=False, indent=2)
    print("saved", out, sorted(os.listdir(out)), file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
