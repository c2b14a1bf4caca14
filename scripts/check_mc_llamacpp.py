"""An independent check of pocket's multiple-choice log-likelihoods: llama.cpp (llama-cpp-python,
scripts/llamacpp-venv.sh) scores the same requests on the same GGUF, tokenized as lm-eval's HF
model does (`_encode_pair`: trailing spaces of the context move to the continuation, the whole
text is encoded and split at the context's length; no BOS unless the tokenizer adds one).

Input: the `--out` log of `pocket eval mc MODEL.gguf --task ...` (each line carries the context,
the continuations, the gold index and pocket's log-likelihoods). Prints, over the logged items:
how often the two engines pick the same answer, the largest and median log-likelihood gap,
each engine's accuracy, and which letters each picks.

Usage: .venv-llamacpp/bin/python scripts/check_mc_llamacpp.py MODEL.gguf POCKET_LOG.jsonl
       [--json-out FILE]
"""
import argparse
import collections
import json
import statistics

import numpy as np
from llama_cpp import Llama


def log_softmax(row):
    row = row.astype(np.float64)
    m = row.max()
    return row - m - np.log(np.exp(row - m).sum())


def encode_pair(llm, context, continuation):
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    tok = lambda s: llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
    whole = tok(context + continuation)
    ctx = tok(context)
    return ctx, whole[len(ctx):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("log")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    items = [json.loads(line) for line in open(a.log, encoding="utf-8")]
    items = [it for it in items if "lls" in it]
    # Logits of the last token only (a full-vocabulary row per position would cost more than
    # the model): the context once, then each continuation token by token from there.
    llm = Llama(model_path=a.gguf, n_ctx=4096, n_batch=512, logits_all=False, n_threads=2,
                verbose=False)
    n_vocab = llm.n_vocab()

    def last_logits():
        return log_softmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).copy())

    rows = []
    for it in items:
        lls = []
        pairs = [encode_pair(llm, it["context"], c) for c in it["continuations"]]
        ctx = pairs[0][0]
        assert all(p[0] == ctx for p in pairs), it["id"]
        llm.reset()
        llm.eval(ctx)
        first = last_logits()
        for _, cc in pairs:
            llm.n_tokens = len(ctx)  # eval drops the cache past n_tokens
            ll, lp = 0.0, first
            for i, t in enumerate(cc):
                ll += float(lp[t])
                if i + 1 < len(cc):
                    llm.eval([t])
                    lp = last_logits()
            lls.append(ll)
        gap = max(abs(x - y) for x, y in zip(lls, it["lls"]))
        rows.append({"id": it["id"], "gold": it["answer"], "pocket": it["lls"], "llamacpp": lls,
                     "pred_pocket": int(np.argmax(it["lls"])), "pred_llamacpp": int(np.argmax(lls)),
                     "max_gap": gap})
    n = len(rows)
    same = sum(r["pred_pocket"] == r["pred_llamacpp"] for r in rows)
    acc = lambda k: 100.0 * sum(r[k] == r["gold"] for r in rows) / n
    gaps = [r["max_gap"] for r in rows]
    letters = lambda k: dict(sorted(collections.Counter("ABCDEFGHIJ"[r[k]] for r in rows).items()))
    print(f"{n} items: the same answer in {same} ({100.0 * same / n:.1f} %)")
    print(f"log-likelihood gap |pocket - llama.cpp|: median {statistics.median(gaps):.4f}, "
          f"max {max(gaps):.4f}")
    print(f"accuracy: pocket {acc('pred_pocket'):.2f}, llama.cpp {acc('pred_llamacpp'):.2f}")
    print(f"picks: pocket {letters('pred_pocket')}, llama.cpp {letters('pred_llamacpp')}, "
          f"gold {dict(sorted(collections.Counter('ABCDEFGHIJ'[r['gold']] for r in rows).items()))}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rows, f)


main()
