#!/usr/bin/env python3
"""The activation paths' drift from pocket's exact path, beside llama.cpp's, on the same tokens.

For each GGUF: tokenize TEXT with llama.cpp (pocket must agree), score it in windows of CTX with
llama.cpp (llama-cpp-python, 2 threads, its default f16 KV cache), and with pocket's three
activation paths (`eval ppl --tokens`): f32 (the exact path: f32 activations and KV cache), int8x2
(the default) and int8, each with its KL from the f32 path and top-1 agreement. Prints a
markdown table and, with --json OUT, the rows. Windows open with BOS where the model's texts do
(Gemma), as `pocket eval ppl --bos auto` cuts them.
Usage: check_act_precision.py POCKET_BIN TEXT FILE.gguf... [--ctx 512] [--json OUT]
"""
import argparse
import json
import subprocess
import sys
import tempfile

from llama_cpp import Llama

from check_gguf_llamacpp import llama_ppl


def pocket_ppl(bin_, model, toks, ctx, bos, act, baseline=False):
    args = [bin_, "eval", "ppl", model, "--tokens", toks, "--ctx", str(ctx), "--bos", bos,
            "--activations", act, "--json"]
    if act == "f32":
        args += ["--kv", "f32"]
    if baseline:
        args += ["--baseline", model, "--baseline-activations", "f32", "--baseline-kv", "f32"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pocket")
    ap.add_argument("text")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print("| file | tokens | f32 ppl | llama.cpp ppl (drift) | int8x2 ppl (drift) | int8x2 KL | int8 ppl (drift) | int8 KL |")
    print("|---|---|---|---|---|---|---|---|")
    for f in a.files:
        llm = Llama(f, n_ctx=a.ctx + 1, n_batch=a.ctx + 1, n_threads=2, logits_all=True, verbose=False)
        text = open(a.text, "rb").read()
        toks = llm.tokenize(text, add_bos=False, special=False)
        gemma = "gemma" in (llm.metadata.get("general.architecture", "") or "")
        prefix = llm.token_bos() if gemma else None
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as t:
            json.dump(toks, t)
        bos = "yes" if gemma else "no"
        lp, n = llama_ppl(llm, toks, prefix, ctx=a.ctx)
        del llm
        exact = pocket_ppl(a.pocket, f, t.name, a.ctx, bos, "f32")
        if exact["tokens"] != n:
            sys.exit(f"{f}: pocket scored {exact['tokens']} tokens, llama.cpp {n}")
        r = {"file": f, "tokens": n, "f32_ppl": exact["ppl"], "llamacpp_ppl": lp}
        for act in ["int8x2", "int8"]:
            p = pocket_ppl(a.pocket, f, t.name, a.ctx, bos, act, baseline=True)
            r[act] = {"ppl": p["ppl"], "kl": p["kld_mean"], "top1": p["top1_agree"]}
        rows.append(r)
        d = lambda p: f"{p:.4f} ({100 * (p / exact['ppl'] - 1):+.2f} %)"
        print(f"| {f.split('/')[-1]} | {n} | {exact['ppl']:.4f} | {d(lp)} | {d(r['int8x2']['ppl'])} | "
              f"{r['int8x2']['kl']:.6f} | {d(r['int8']['ppl'])} | {r['int8']['kl']:.6f} |", flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
