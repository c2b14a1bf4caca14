"""llama.cpp's side of structured output: the cases of check_structured.py answered by the pinned
llama-cpp-python (scripts/llamacpp-venv.sh), once with the case's JSON schema as
`response_format={"type": "json_object", "schema": ...}` (llama-cpp-python turns it into a GBNF
grammar) and once free, judged with check_structured.py's own parser and validator.

Usage (with the llama.cpp venv's python, which needs `pip install jsonschema`):
  .venv-llamacpp/bin/python scripts/bench_structured_llamacpp.py --model MODEL.gguf
      --cases evals/data/structured/extraction.jsonl --threads 2 [--max-tokens 256]
      [--json-out FILE] [--only ID,...] [--limit N] [--reps N] [-v]

Each answer is streamed (greedy, temperature 0, repeat penalty 1.0, the GGUF's chat template,
n_ctx 2048, the KV cache reset before every answer so nothing of a previous prompt is reused).
Timings, wall clock: first_token_ms from the call to the first content chunk (templating,
grammar set-up, prefill, first sample); decode tok/s = (n - 1) / (end - first token), as pocket's
decode_tok_per_s counts (tokens after the first over the time after the first), grammar sampling
included; gen_ms from the call to the end. n = completion tokens, from llama.cpp's own counters
(llama_perf_context: n_eval, plus the last token when cut at max_tokens, which is never
evaluated). The same counters give compute-only figures (eval_ms: decode without sampling).

"refused": llama-cpp-python's schema converter raised, or llama.cpp's grammar parser rejected the
grammar it made. llama-cpp-python would then silently fall back to a plain-JSON grammar; this
script says "refused" and runs the constrained answer under that fallback (json_object without
schema), judged against the schema all the same.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_structured import (CUT, DEFAULT_CASES, fmt, lenient_loads, med, pct, read_jsonl,  # noqa: E402
                              recall, schema_error, strict_loads, validator)

import llama_cpp  # noqa: E402
from llama_cpp import llama_grammar  # noqa: E402


def rewrite_pattern(pattern):
    """The same regex in a form llama-cpp-python 0.3.x's converter turns into valid GBNF: it
    copies `\\d` and escaped punctuation such as `\\.` into GBNF string literals, where
    llama.cpp's grammar parser rejects them as unknown escapes. Outside a class `\\d` becomes
    `[0-9]` (what ECMA-262 means by it) and `\\.` `\\-` `\\/` ... become `[.]` `[-]` `[/]`;
    inside a class `\\d` becomes `0-9` and `\\.` becomes `.`. The converter's own escapes
    (`\\(` `\\+` `\\[` ...) are kept."""
    keep = set("[]()|{}*+?^$\\")
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif in_class and nxt == ".":
                out.append(".")
            elif not in_class and not nxt.isalnum() and nxt not in keep:
                out.append(f"[{nxt}]")
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        out.append(ch)
        i += 1
    return "".join(out)


def rewrite_schema(s):
    if isinstance(s, dict):
        return {k: (rewrite_pattern(v) if k == "pattern" and isinstance(v, str) else rewrite_schema(v))
                for k, v in s.items()}
    if isinstance(s, list):
        return [rewrite_schema(x) for x in s]
    return s


def grammar_for(llm, schema):
    """(gbnf, None) or (None, why refused)."""
    try:
        gbnf = llama_grammar.json_schema_to_gbnf(json.dumps(schema))
    except Exception as e:  # the converter raises ValueError, AssertionError, KeyError...
        return None, f"schema converter: {type(e).__name__}: {e}"
    # llama.cpp parses the grammar when the sampler is made; NULL means it rejected it (after
    # printing the error and the whole grammar on fd 2: silenced here, the reason is recorded)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            smpl = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode("utf-8"), b"root")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    if not smpl:
        return None, "llama.cpp rejected the generated grammar"
    llama_cpp.llama_sampler_free(smpl)
    return gbnf, None


def answer(llm, prompt, max_tokens, response_format):
    llm.reset()
    ctx = llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    kw = {"response_format": response_format} if response_format else {}
    t0 = time.perf_counter()
    t_first = t_end = None
    parts, finish = [], None
    for chunk in llm.create_chat_completion(
            messages=[{"role": "user", "content": prompt}], temperature=0.0, repeat_penalty=1.0,
            max_tokens=max_tokens, stream=True, **kw):
        ch = chunk["choices"][0]
        piece = ch.get("delta", {}).get("content")
        now = time.perf_counter()
        if piece:
            if t_first is None:
                t_first = now
            parts.append(piece)
        if ch.get("finish_reason"):
            finish = ch["finish_reason"]
        t_end = now
    t_done = time.perf_counter()
    perf = llama_cpp.llama_perf_context(ctx)
    n = perf.n_eval + (1 if finish == "length" else 0)
    if t_first is None:
        t_first = t_end or t_done
    dec_s = (t_end or t_done) - t_first
    return {
        "text": "".join(parts),
        "finish_reason": finish,
        "generated_tokens": n,
        "prompt_tokens": perf.n_p_eval,
        "first_token_ms": (t_first - t0) * 1e3,
        "decode_ms": dec_s * 1e3,
        "gen_ms": ((t_end or t_done) - t0) * 1e3,
        "wall_ms": (t_done - t0) * 1e3,
        "decode_tok_per_s": (n - 1) / dec_s if n > 1 and dec_s > 0 else None,
        "prefill_eval_ms": perf.t_p_eval_ms,
        "eval_ms": perf.t_eval_ms,
        "eval_tok_per_s": perf.n_eval / (perf.t_eval_ms / 1e3) if perf.t_eval_ms > 0 else None,
    }


def judge(run, v, expected, constrained):
    run["cut"] = run["finish_reason"] in CUT
    try:
        obj = strict_loads(run["text"])
        run["strict_ok"] = True
    except ValueError as e:
        obj, run["strict_ok"], run["parse_error"] = None, False, str(e)
    if constrained:
        run["lenient_ok"] = run["strict_ok"]
    else:
        try:
            obj, run["lenient_how"] = lenient_loads(run["text"])
            run["lenient_ok"] = True
        except ValueError:
            run["lenient_ok"] = False
    if run["lenient_ok"]:
        err = schema_error(v, obj)
        run["valid"], run["validation_error"] = err is None, err
        run["recall"] = recall(expected, obj) if expected is not None else None
    else:
        run["valid"] = False
    if constrained:
        run["ok"] = run["finish_reason"] == "stop" and run["strict_ok"] and run["valid"]
        run["status"] = "ok" if run["ok"] else ("cut" if run["cut"] else "FAIL")
    else:
        run["status"] = "valid" if run["valid"] else (
            "json" if run["lenient_ok"] else ("cut" if run["cut"] else "text"))
    return run


def median_runs(runs):
    r = dict(runs[0])
    for k in ("first_token_ms", "decode_ms", "gen_ms", "wall_ms", "decode_tok_per_s",
              "prefill_eval_ms", "eval_ms", "eval_tok_per_s"):
        r[k] = med([x.get(k) for x in runs])
    r["reps"] = len(runs)
    r["reps_identical"] = len({x["text"] for x in runs}) == 1
    return r


def summarize(results):
    n = len(results)
    C = [r["constrained"] for r in results]
    F = [r["free"] for r in results]
    s = {"cases": n, "refused": [r["id"] for r in results if r.get("refused")],
         "refused_as_written": [r["id"] for r in results if r.get("refused_as_written")],
         "rewritten_pattern": [r["id"] for r in results if r.get("rewritten_pattern")],
         "constrained": {
             "parse_pct": pct(sum(c["strict_ok"] and c["finish_reason"] == "stop" for c in C), n),
             "valid_pct": pct(sum(c["ok"] for c in C), n),
             "cut": sum(c["cut"] for c in C),
             "stopped_invalid": sum(c["status"] == "FAIL" for c in C),
             "recall": med([c.get("recall") for c in C if c["ok"]]),
         },
         "free": {
             "strict_pct": pct(sum(f["strict_ok"] for f in F), n),
             "lenient_pct": pct(sum(f["lenient_ok"] for f in F), n),
             "valid_pct": pct(sum(f["valid"] for f in F), n),
             "cut": sum(f["cut"] for f in F),
             "recall": med([f.get("recall") for f in F if f["lenient_ok"]]),
         }}
    for key, rs in (("constrained", C), ("free", F)):
        s[key].update({k: med([r.get(k) for r in rs]) for k in (
            "decode_tok_per_s", "eval_tok_per_s", "first_token_ms", "gen_ms", "wall_ms",
            "generated_tokens")})
    c, f = s["constrained"]["decode_tok_per_s"], s["free"]["decode_tok_per_s"]
    s["decode_ratio"] = c / f if c and f else None
    c, f = s["constrained"]["gen_ms"], s["free"]["gen_ms"]
    s["gen_ms_ratio"] = c / f if c and f else None
    return s


def print_summary(model, s):
    c, f = s["constrained"], s["free"]
    print(f"\n== llama.cpp {os.path.basename(model)}: extraction, {s['cases']} cases ==")
    rows = [
        ("parse % (strict)", fmt(c["parse_pct"]), fmt(f["strict_pct"])),
        ("parse % (lenient)", "-", fmt(f["lenient_pct"])),
        ("schema-valid %", fmt(c["valid_pct"]), fmt(f["valid_pct"])),
        ("refused as written (count)", str(len(s["refused_as_written"])), "-"),
        ("  run with patterns rewritten", str(len(s["rewritten_pattern"])), "-"),
        ("  refused even so (count)", str(len(s["refused"])), "-"),
        ("cut at max_tokens (count)", str(c["cut"]), str(f["cut"])),
        ("stopped but invalid (count)", str(c["stopped_invalid"]), "-"),
        ("median recall of expected", fmt(c["recall"], "{:.2f}"), fmt(f["recall"], "{:.2f}")),
        ("median generated tokens", fmt(c["generated_tokens"], "{:.0f}"), fmt(f["generated_tokens"], "{:.0f}")),
        ("median decode tok/s (wall)", fmt(c["decode_tok_per_s"]), fmt(f["decode_tok_per_s"])),
        ("  ratio constrained/free", fmt(s["decode_ratio"], "{:.3f}"), ""),
        ("median eval tok/s (compute)", fmt(c["eval_tok_per_s"]), fmt(f["eval_tok_per_s"])),
        ("median first-token ms", fmt(c["first_token_ms"], "{:.0f}"), fmt(f["first_token_ms"], "{:.0f}")),
        ("median gen ms", fmt(c["gen_ms"], "{:.0f}"), fmt(f["gen_ms"], "{:.0f}")),
        ("  ratio constrained/free", fmt(s["gen_ms_ratio"], "{:.3f}"), ""),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  {'constrained':>12}  {'free':>8}")
    for name, cv, fv in rows:
        print(f"{name:<{w}}  {cv:>12}  {fv:>8}")
    if s["refused_as_written"]:
        print("refused as written: " + ", ".join(s["refused_as_written"]))
    if s["refused"]:
        print("refused even with patterns rewritten (run under plain JSON): " + ", ".join(s["refused"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--only", action="append", default=[], help="case ids (repeatable, comma-separated)")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--json-out")
    ap.add_argument("--no-rewrite", action="store_true",
                    help="send patterns as written even when the converter refuses them")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    cases = read_jsonl(a.cases)
    only = {x for o in a.only for x in o.split(",") if x}
    if only:
        cases = [c for c in cases if c["id"] in only]
    if a.limit:
        cases = cases[:a.limit]

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=2048, n_threads=a.threads,
                          n_threads_batch=a.threads, verbose=False)
    load_s = time.perf_counter() - t0
    answer(llm, "Hi", 4, None)  # warm-up: the first call pays for page faults and allocations

    results = []
    for i, c in enumerate(cases):
        v = validator(c["schema"])
        gbnf, refused = grammar_for(llm, c["schema"])
        sent, rewritten = c["schema"], False
        if refused and not a.no_rewrite:
            alt = rewrite_schema(c["schema"])
            if alt != c["schema"]:
                gbnf, still = grammar_for(llm, alt)
                if gbnf:
                    sent, rewritten = alt, True
                else:
                    refused += f"; with the pattern rewritten: {still}"
        rf = {"type": "json_object", "schema": sent} if gbnf else {"type": "json_object"}
        con, free = [], []
        for rep in range(a.reps):
            for m in (["c", "f"] if (i + rep) % 2 == 0 else ["f", "c"]):
                if m == "c":
                    con.append(answer(llm, c["prompt"], a.max_tokens, rf))
                else:
                    free.append(answer(llm, c["prompt"], a.max_tokens, None))
        cr = judge(median_runs(con), v, c.get("expected"), True)
        fr = judge(median_runs(free), v, c.get("expected"), False)
        rec = {"id": c["id"], "lang": c.get("lang"), "refused": refused if not gbnf else None,
               "refused_as_written": refused, "rewritten_pattern": rewritten,
               "constrained": cr, "free": fr}
        if a.verbose or a.json_out:
            rec["gbnf"] = gbnf
        results.append(rec)
        tag = " (refused)" if not gbnf else (" (pattern rewritten)" if rewritten else "")
        print(f"  {c['id']:<26} constrained {cr['status']:<5}{tag} "
              f"{cr['generated_tokens']:>4} tok {fmt(cr['decode_tok_per_s']):>6} tok/s | free "
              f"{fr['status']:<5} {fr['generated_tokens']:>4} tok {fmt(fr['decode_tok_per_s']):>6} tok/s",
              file=sys.stderr, flush=True)
        if a.verbose:
            print(f"    C: {cr['text']!r}\n       {cr.get('validation_error') or cr.get('parse_error') or ''}"
                  f"\n    F: {fr['text']!r}", file=sys.stderr)
    s = summarize(results)
    print_summary(a.model, s)
    if a.json_out:
        out = {"engine": "llama.cpp", "llama_cpp_python": getattr(llama_cpp, "__version__", None),
               "model": a.model, "threads": a.threads, "max_tokens": a.max_tokens, "reps": a.reps,
               "load_s": load_s, "summary": s, "cases": results}
        with open(a.json_out, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
