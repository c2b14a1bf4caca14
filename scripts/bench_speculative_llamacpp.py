"""Prompt-lookup speculation in llama.cpp next to pocket's, on the same GGUF and prompts: for each
prompt, llama-cpp-python decodes greedily (temperature 0, top-k 1, repeat penalty 1.0) up to
--max-tokens plainly and with `LlamaPromptLookupDecoding` (its prompt-lookup draft; --ngram,
--pred), and `pocket bench --speculate lookup` does the same with pocket; the engines and the
two modes alternate, --reps times, and each figure is a median.

Both engines get the same prompt token ids (pocket's chat rendering, from `pocket run --json`) and
stop at the same end-of-answer ids. Decode tok/s = (n - 1) / (time after the first token), as
pocket's decode_tok_per_s counts. "identical" says whether the speculative answer's token ids
equal the same engine's plain answer, in every repetition; "= pocket" whether llama.cpp's plain
answer equals pocket's (two engines' rounding may part at a near-tie).

Usage (the llama.cpp venv, scripts/llamacpp-venv.sh):
  .venv-llamacpp/bin/python scripts/bench_speculative_llamacpp.py --model MODEL.gguf
      --prompts evals/data/speculative/copy.jsonl [--pocket target/release/pocket] [--threads 2]
      [--max-tokens 256] [--reps 3] [--ngram 2] [--pred 10] [--json-out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pocket_prompt(pocket, model, prompt):
    """pocket's prompt ids and its greedy answer's ids for one prompt (chat template applied)."""
    out = subprocess.run([pocket, "run", model, "-p", prompt, "--json", "-n", "1"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["prompt_ids"]


def pocket_bench(pocket, model, prompt, max_tokens, reps, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"prompt": prompt}) + "\n")
        path = f.name
    try:
        out = subprocess.run([pocket, "bench", model, "--speculate", "lookup", "--prompts", path,
                              "-n", str(max_tokens), "--reps", str(reps), "-t", str(threads),
                              "--json"], capture_output=True, text=True)
        if out.returncode not in (0, 1):
            sys.exit(f"pocket bench failed: {out.stderr}")
        return json.loads(out.stdout)["prompts"][0]
    finally:
        os.unlink(path)


def llama_decode(llm, ids, max_tokens, stops):
    """Greedy tokens after `ids` and the decode rate after the first token."""
    llm.reset()
    out, first, end = [], None, None
    for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
                            reset=True):
        now = time.perf_counter()
        if tok in stops:
            break
        out.append(tok)
        if first is None:
            first = now
        end = now
        if len(out) >= max_tokens:
            break
    rate = (len(out) - 1) / (end - first) if len(out) > 1 and end > first else float("nan")
    return out, rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--pocket", default=os.path.join(ROOT, "target/release/pocket"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ngram", type=int, default=2)
    ap.add_argument("--pred", type=int, default=10)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    prompts = [json.loads(l)["prompt"] for l in open(a.prompts, encoding="utf-8") if l.strip()]
    common = dict(model_path=a.model, n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads,
                  verbose=False)
    plain = llama_cpp.Llama(**common)
    # The draft's rows need their logits kept (without it llama-cpp-python 0.3.36 fails to
    # store a pass of more rows than its batch of scores: "could not broadcast").
    lookup = llama_cpp.Llama(**common, logits_all=True, draft_model=LlamaPromptLookupDecoding(
        max_ngram_size=a.ngram, num_pred_tokens=a.pred))
    stops = {plain.token_eos()}
    for name in ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>"):
        t = plain.tokenize(name.encode(), add_bos=False, special=True)
        if len(t) == 1:
            stops.add(t[0])
    rows = []
    for p in prompts:
        ids = pocket_prompt(a.pocket, a.model, p)
        lp, ll, same, want = [], [], True, None
        pk = None
        for rep in range(a.reps):
            order = [("plain", plain), ("lookup", lookup)]
            if rep % 2:
                order.reverse()
            for mode, llm in order:
                toks, rate = llama_decode(llm, ids, a.max_tokens, stops)
                (lp if mode == "plain" else ll).append(rate)
                if mode == "plain" and want is None:
                    want = toks
                same &= want is None or toks == want
            # pocket alternates its two modes itself; one repetition per llama repetition.
            r = pocket_bench(a.pocket, a.model, p, a.max_tokens, 1, a.threads)
            pk = pk or {"plain": [], "lookup": [], "identical": True, "tokens": r["tokens"]}
            pk["plain"].append(r["plain_tok_s"])
            pk["lookup"].append(r["speculative_tok_s"])
            pk["identical"] &= r["identical"]
        # llama.cpp's plain answer against pocket's (pocket run greedy, same limit).
        pocket_ids = json.loads(subprocess.run(
            [a.pocket, "run", a.model, "--prompt-ids", ",".join(map(str, ids)), "--json", "-n",
             str(a.max_tokens)], check=True, capture_output=True, text=True).stdout)["generated_ids"]
        row = {
            "prompt": p[:50].replace("\n", " "),
            "llama_plain": statistics.median(lp), "llama_lookup": statistics.median(ll),
            "llama_identical": same, "llama_tokens": len(want or []),
            "pocket_plain": statistics.median(pk["plain"]),
            "pocket_lookup": statistics.median(pk["lookup"]),
            "pocket_identical": pk["identical"], "pocket_tokens": pk["tokens"],
            "llama_equals_pocket": (want or []) == pocket_ids[:len(want or [])]
            and len(want or []) == len(pocket_ids),
        }
        row["llama_speedup"] = row["llama_lookup"] / row["llama_plain"]
        row["pocket_speedup"] = row["pocket_lookup"] / row["pocket_plain"]
        rows.append(row)
        print(f"{row['prompt'][:40]:40} llama {row['llama_plain']:6.1f} → {row['llama_lookup']:6.1f}"
              f" ({row['llama_speedup']:.2f}×, {'same' if same else 'DIFFERS'}) · pocket "
              f"{row['pocket_plain']:6.1f} → {row['pocket_lookup']:6.1f} "
              f"({row['pocket_speedup']:.2f}×, {'same' if pk['identical'] else 'DIFFERS'})"
              f"{'' if row['llama_equals_pocket'] else ' · engines part'}", flush=True)
    med = lambda k: statistics.median(r[k] for r in rows)
    summary = {
        "llama_speedup_median": med("llama_speedup"), "pocket_speedup_median": med("pocket_speedup"),
        "llama_identical": sum(r["llama_identical"] for r in rows),
        "pocket_identical": sum(r["pocket_identical"] for r in rows),
        "llama_plain_median": med("llama_plain"), "pocket_plain_median": med("pocket_plain"),
        "llama_lookup_median": med("llama_lookup"), "pocket_lookup_median": med("pocket_lookup"),
        "prompts": len(rows),
    }
    print(json.dumps(summary))
    if a.json_out:
        json.dump({"rows": rows, "summary": summary, "model": a.model, "ngram": a.ngram,
                   "pred": a.pred, "llama_cpp": llama_cpp.__version__}, open(a.json_out, "w"),
                  indent=1)


if __name__ == "__main__":
    main()
