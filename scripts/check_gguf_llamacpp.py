#!/usr/bin/env python3
"""Compare pocket and llama.cpp on GGUF files (see check-gguf-llamacpp.sh).

For each file: tokenize a fixed text with llama.cpp, check pocket's tokenizer gives the same
ids, compute perplexity over the same >= 2,048 tokens in both (windows of 512, every token after
the first scored; for a model whose texts open with BOS, as Gemma's, each window is BOS and 511
tokens, all scored, as `pocket eval ppl` cuts them), and greedy-generate 32 tokens for three chat prompts from the same prompt
ids. Then read the file with gguf-py and compare every tensor's dequantization with pocket's
(`pocket inspect FILE --dump NAME --to OUT`), bit for bit.
Usage: check_gguf_llamacpp.py POCKET_BIN TEXT FILE.gguf...
"""
import json
import math
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from llama_cpp import Llama

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "Give me three tips for staying healthy."]
CTX = 512
N_TOKENS = 2048


def pocket_json(bin_, *args):
    out = subprocess.run([bin_, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def llama_ppl(llm, tokens, prefix=None, ctx=CTX):
    """Windows as pocket's `eval ppl` cuts them: ctx tokens, or a prefix (BOS) and ctx - 1."""
    nll, n = 0.0, 0
    step = ctx - (prefix is not None)
    for s in range(0, len(tokens), step):
        w = ([prefix] if prefix is not None else []) + tokens[s:s + step]
        if len(w) < 2:
            continue
        llm.reset()
        llm.eval(w)
        logits = np.array(llm.scores[:len(w)], dtype=np.float64)
        for i in range(len(w) - 1):
            row = logits[i]
            m = row.max()
            lse = m + math.log(np.exp(row - m).sum())
            nll += lse - row[w[i + 1]]
            n += 1
    return math.exp(nll / n), n


def llama_greedy(llm, ids, n=32):
    llm.reset()
    out = []
    for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        if tok == llm.token_eos() or len(out) == n:
            break
        out.append(tok)
    return out


def main(bin_, text_path, *files):
    text = open(text_path).read()
    rows = []
    for f in files:
        llm = Llama(model_path=f, n_ctx=CTX, logits_all=True, n_threads=2, verbose=False)
        toks = llm.tokenize(text.encode(), add_bos=False, special=False)[:N_TOKENS]
        mine = pocket_json(bin_, "run", f, "--raw", "-p", llm.detokenize(toks[:200]).decode(), "-n", "1", "--json")["prompt_ids"]
        if mine[:1] == [llm.token_bos()] and toks[:1] != mine[:1]:
            mine = mine[1:]  # a --raw prompt starts with BOS when the model adds one (Gemma)
        # A base model (no chat template) continues the prompts as plain text.
        raw = [] if "tokenizer.chat_template" in GGUFReader(f).fields else ["--raw"]
        tok_ok = mine[:150] == toks[:150]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tf:
            json.dump(toks, tf)
        ours = pocket_json(bin_, "eval", "ppl", f, "--tokens", tf.name, "--ctx", str(CTX), "--json")
        theirs, n = llama_ppl(llm, toks, ours.get("bos_prefix"))
        same = 0
        for p in PROMPTS:
            r = pocket_json(bin_, "run", f, *raw, "-p", p, "--temp", "0", "-n", "32", "--json")
            same += int(r["generated_ids"] == llama_greedy(llm, r["prompt_ids"])[:len(r["generated_ids"])])
        # Every tensor: gguf-py's dequantization must equal pocket's, bit for bit.
        from gguf.quants import dequantize
        reader = GGUFReader(f)
        bad = 0
        with tempfile.TemporaryDirectory() as td:
            for t in reader.tensors:
                subprocess.run([bin_, "inspect", f, "--dump", t.name, "--to", td + "/t.f32"], check=True)
                mine_t = np.fromfile(td + "/t.f32", dtype=np.float32)
                ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
                bad += int(not np.array_equal(mine_t.view(np.uint32), ref.view(np.uint32)))
        rows.append((f.split("/")[-1], len(reader.tensors), tok_ok, ours["ppl"], theirs, n, same, bad))
        del llm
    print(f"{'file':34} {'tensors':>7} {'≠gguf-py':>8} {'tok=':>5} {'ppl pocket':>11} {'ppl llama.cpp':>13} {'diff %':>7} {'greedy =':>8}")
    worst = 0.0
    for name, nt, tok_ok, a, b, n, same, bad in rows:
        d = 100 * abs(a - b) / b
        worst = max(worst, d)
        print(f"{name:34} {nt:7} {bad:8} {str(tok_ok):>5} {a:11.4f} {b:13.4f} {d:7.3f} {same:>5}/{len(PROMPTS)}")
    print(f"(perplexity over {rows[0][5] if rows else 0} tokens; worst difference {worst:.3f} %)")
    sys.exit(0 if worst < 0.5 and all(r[2] and r[7] == 0 for r in rows) else 1)


if __name__ == "__main__":
    main(*sys.argv[1:])
