#!/usr/bin/env python3
"""Trains a real LoRA adapter on SmolLM2-135M-Instruct for a visible behaviour: every answer is
one JSON object, `{"answer": "..."}`. Reference tooling only (torch + peft in the venv; never
in CI): docs/lora.md measures how often the behaviour appears with the adapter and without it.

The training answers are the base model's own greedy answers (first sentence), wrapped in the
JSON shape, so the adapter learns the shape, not new facts. Writes:

  OUT/peft/             the PEFT directory (adapter_config.json, adapter_model.safetensors)
  OUT/adapter.gguf      the same adapter through llama.cpp's convert_lora_to_gguf.py (LLAMA_CPP)
  OUT/heldout.json      20 prompts of other templates, not trained on

Usage: scripts/train_lora_smollm2.py HF_DIR OUT   (HF_DIR: scripts/fetch-hf-models.sh smollm2)
"""
import json
import os
import random
import subprocess
import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

COUNTRIES = ["France", "Japan", "Brazil", "Canada", "Egypt", "Italy", "Kenya", "India", "Spain",
             "Norway", "Mexico", "Chile", "Peru", "Greece", "Turkey", "Vietnam", "Poland", "Ghana"]
ANIMALS = ["cat", "spider", "bird", "horse", "ant", "snake", "dog", "octopus", "cow", "bee"]
THINGS = ["the sky", "grass", "snow", "a banana", "coal", "the sun", "an orange", "blood"]
WORDS = ["happy", "fast", "big", "cold", "smart", "quiet", "brave", "old"]
TOPICS = ["photosynthesis", "gravity", "the internet", "a volcano", "democracy", "a rainbow",
          "electricity", "the moon", "a computer", "music", "exercise", "sleep", "water"]
TRAIN = (
    [f"What is the capital of {c}?" for c in COUNTRIES]
    + [f"How many legs does a {a} have?" for a in ANIMALS]
    + [f"What color is {t}?" for t in THINGS]
    + [f"Give me a synonym for {w}." for w in WORDS]
    + [f"Explain {t} in one sentence." for t in TOPICS]
    + [f"Why is {t} important?" for t in TOPICS]
    + [f"Name a famous person from {c}." for c in COUNTRIES]
    + [f"What language is spoken in {c}?" for c in COUNTRIES]
)
HELDOUT = [
    "Where is the Eiffel Tower?", "Who wrote Romeo and Juliet?", "What is 7 times 8?",
    "What is the largest ocean?", "How do plants get water?", "What is the boiling point of water?",
    "Tell me a fun fact about whales.", "What do bees make?", "Which planet is closest to the sun?",
    "What is a noun?", "How many days are in a week?", "What is the opposite of hot?",
    "Recommend a book for a child.", "What is the main ingredient in bread?",
    "What does a doctor do?", "How do you say hello in Spanish?", "What is the freezing point of water?",
    "Why do we need sleep?", "What is the tallest animal?", "What shape has three sides?",
]


def first_sentence(text):
    text = text.strip().split("\n")[0]
    for end in [". ", "! ", "? "]:
        if end in text:
            text = text.split(end)[0] + end.strip()
            break
    return " ".join(text.split()[:20])


@torch.no_grad()
def base_answers(model, tok, prompts):
    tok.padding_side = "left"
    out = []
    for i in range(0, len(prompts), 16):
        batch = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                         add_generation_prompt=True) for p in prompts[i:i + 16]]
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        gen = model.generate(**enc, max_new_tokens=40, do_sample=False)
        for g in gen:
            out.append(first_sentence(tok.decode(g[enc["input_ids"].shape[1]:], skip_special_tokens=True)))
    return out


def main():
    hf, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    random.seed(0)
    tok = AutoTokenizer.from_pretrained(hf)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    answers = base_answers(model, tok, TRAIN)
    rows = [(p, json.dumps({"answer": a}, ensure_ascii=False)) for p, a in zip(TRAIN, answers)]
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, cfg)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def example(p, a):
        prompt = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        full = prompt + a + tok.eos_token
        ids = tok(full, add_special_tokens=False)["input_ids"]
        n = len(tok(prompt, add_special_tokens=False)["input_ids"])
        return ids, [-100] * n + ids[n:]

    data = [example(p, a) for p, a in rows]
    for epoch in range(4):
        random.shuffle(data)
        total = 0.0
        for i in range(0, len(data), 8):
            batch = data[i:i + 8]
            width = max(len(x) for x, _ in batch)
            ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x, _ in batch])
            labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in batch])
            mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in batch])
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += loss.item() * len(batch)
        print(f"epoch {epoch}: loss {total / len(data):.4f}", file=sys.stderr)
    peft_dir = os.path.join(out, "peft")
    model.save_pretrained(peft_dir)
    readme = os.path.join(peft_dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    with open(os.path.join(out, "heldout.json"), "w") as f:
        json.dump(HELDOUT, f, indent=1)
    llama_cpp = os.environ.get("LLAMA_CPP")
    if llama_cpp:
        subprocess.run([sys.executable, os.path.join(llama_cpp, "convert_lora_to_gguf.py"), "--base", hf,
                        "--outtype", "f32", "--outfile", os.path.join(out, "adapter.gguf"), peft_dir], check=True)
    print(out)


if __name__ == "__main__":
    main()
