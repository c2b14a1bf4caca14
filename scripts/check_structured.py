"""Structured output, checked independently of pocket: every answer pocket gives under a JSON
schema (`pocket run --json-schema`) is parsed here with Python's json and validated with the
`jsonschema` package (Draft 2020-12, format checking off), next to the same prompt answered
without a schema. With --tools, the same for tool calls (`pocket run --tools FILE`).

Usage:
  python scripts/check_structured.py --pocket target/release/pocket --model MODEL [--model M2 ...]
      [--cases evals/data/structured/extraction.jsonl] [--max-tokens 256] [--reps 1]
      [--json-out FILE]
  python scripts/check_structured.py --pocket target/release/pocket --model MODEL
      --tools evals/data/structured/tools.json
      --tool-prompts evals/data/structured/tool_prompts.jsonl [--tool-choice auto]
  python scripts/check_structured.py --self-test

Extraction: for each model and case, `POCKET run MODEL -p PROMPT --json --temp 0 -n MAX
--json-schema SCHEMA` (constrained) and the same without --json-schema (free), the order
alternating from case to case (and from rep to rep). Without --tools the cases default to
evals/data/structured/extraction.jsonl; with --tools they run only when --cases is given.

A constrained answer succeeds when it ended by itself (finish_reason "stop"), parses as strict
JSON (no NaN/Infinity, no duplicate keys) and validates. An answer cut at -n ("length", or
"context") is counted apart, as not a success. A free answer is counted "strict" when the whole
text parses, "lenient" when a JSON object can be dug out of it (a ```json fence, or the first
{...} that decodes), whether or not it was cut; "valid" is the lenient object validated.
"recall" is the share of the case's hand-written `expected` leaf values found in the answer.

Exit status: 1 when a constrained answer that stopped by itself fails to parse or validate, when
a run fails (non-zero exit, no JSON on stdout), or when under --tool-choice required a tool call
has arguments that fail its schema, names an unknown tool, or no call is made; 2 on bad usage.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter

try:
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError:  # pragma: no cover
    sys.exit("check_structured.py needs the jsonschema package: pip install jsonschema")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "evals", "data", "structured")
DEFAULT_CASES = os.path.join(DATA, "extraction.jsonl")
DEFAULT_TOOLS = os.path.join(DATA, "tools.json")
DEFAULT_TOOL_PROMPTS = os.path.join(DATA, "tool_prompts.jsonl")
DEFAULT_INTENTS = os.path.join(DATA, "intents.jsonl")
INTENT_LABELS = ["set_alarm", "weather", "play_music", "send_message", "call_contact",
                 "navigation", "calendar", "timer", "smart_home", "other"]
CUT = ("length", "context")


# ----------------------------------------------------------------------------- JSON helpers

def _no_constant(name):
    raise ValueError(f"not JSON: {name}")


def _pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


_DECODER = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_pairs)


def strict_loads(text):
    """The whole text (surrounding whitespace aside) as standard JSON: raises ValueError."""
    s = text.strip()
    obj, end = _DECODER.raw_decode(s)
    if end != len(s):
        raise ValueError(f"extra data after the JSON value at char {end}: {s[end:end + 20]!r}")
    return obj


def lenient_loads(text):
    """A JSON object dug out of a chatty answer: the whole text, a ``` fence, or the first {...}
    that decodes. Returns (obj, how) or raises ValueError."""
    try:
        return strict_loads(text), "whole"
    except ValueError:
        pass
    for m in re.finditer(r"```[A-Za-z]*[ \t]*\n?(.*?)```", text, re.S):
        try:
            return strict_loads(m.group(1)), "fence"
        except ValueError:
            pass
    tried = 0
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = _DECODER.raw_decode(text, m.start())
        except ValueError:
            tried += 1
            if tried > 50:
                break
            continue
        if isinstance(obj, dict):
            return obj, "brace"
    raise ValueError("no JSON object found")


def validator(schema):
    # No format_checker: "format" is an annotation only, as the brief (and most engines) take it.
    return Draft202012Validator(schema)


def schema_error(v, instance):
    """None when valid, else the most relevant error as 'path: message'."""
    err = jsonschema.exceptions.best_match(v.iter_errors(instance))
    if err is None:
        return None
    path = "/" + "/".join(str(p) for p in err.absolute_path)
    return f"{path}: {err.message}"


def _norm_leaf(x):
    if isinstance(x, bool) or x is None:
        return ("b", x)
    if isinstance(x, (int, float)):
        return ("n", round(float(x), 4))
    if isinstance(x, str):
        return ("s", " ".join(x.casefold().split()))
    return ("o", json.dumps(x, sort_keys=True))


def _leaves(x, path=""):
    """(path without list indices, normalized value) pairs."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{path}/{k}")
    elif isinstance(x, list):
        for v in x:
            yield from _leaves(v, f"{path}[]")
    else:
        yield (path, _norm_leaf(x))


def recall(expected, got):
    """Share of expected leaf values (as a multiset, list order ignored) found in the answer."""
    want = Counter(_leaves(expected))
    if not want:
        return 1.0
    have = Counter(_leaves(got))
    return sum((want & have).values()) / sum(want.values())


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(n, d):
    return None if d == 0 else 100.0 * n / d


def fmt(x, spec="{:.1f}", none="-"):
    return none if x is None else spec.format(x)


def read_jsonl(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise SystemExit(f"{path}:{i}: not JSON: {e}")
    return out


# ----------------------------------------------------------------------------- running pocket

def run_pocket(a, model, prompt, extra):
    cmd = [a.pocket, "run", model, "-p", prompt, "--json", "--temp", "0",
           "-n", str(a.max_tokens)] + extra + a.pocket_args
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {a.timeout}s", "wall_ms": a.timeout * 1e3, "cmd": cmd}
    wall_ms = (time.perf_counter() - t0) * 1e3
    stdout = p.stdout.decode("utf-8", "replace")
    stderr = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {stderr.strip()[-600:]}", "wall_ms": wall_ms,
                "cmd": cmd}
    obj = None
    for cand in [stdout] + stdout.strip().splitlines()[::-1]:
        try:
            obj = json.loads(cand)
            break
        except ValueError:
            continue
    if not isinstance(obj, dict) or "text" not in obj:
        return {"error": f"no JSON object with 'text' on stdout: {stdout[-300:]!r}",
                "wall_ms": wall_ms, "cmd": cmd}
    t = obj.get("timings") or {}
    pre, dec = t.get("prefill_ms"), t.get("decode_ms")
    return {
        "text": obj["text"],
        "finish_reason": obj.get("finish_reason"),
        "generated_tokens": obj.get("generated_tokens"),
        "prompt_tokens": obj.get("prompt_tokens"),
        "forced_tokens": obj.get("forced_tokens"),
        "prefill_ms": pre,
        "decode_ms": dec,
        "gen_ms": None if pre is None or dec is None else pre + dec,
        "decode_tok_per_s": t.get("decode_tok_per_s"),
        "prefill_tok_per_s": t.get("prefill_tok_per_s"),
        "wall_ms": wall_ms,
        "tool_calls": obj.get("tool_calls"),
    }


def median_timings(runs):
    """The first run's answer with each timing the median over the reps."""
    r = dict(runs[0])
    for k in ("prefill_ms", "decode_ms", "gen_ms", "decode_tok_per_s", "prefill_tok_per_s",
              "wall_ms"):
        r[k] = med([x.get(k) for x in runs])
    texts = {x.get("text") for x in runs}
    r["reps"] = len(runs)
    r["reps_identical"] = len(texts) == 1
    return r


def judge_constrained(run, v, expected):
    if "error" in run:
        run.update(ok=False, status="error")
        return run
    cut = run["finish_reason"] in CUT
    try:
        obj = strict_loads(run["text"])
        run["parse_ok"] = True
    except ValueError as e:
        obj = None
        run["parse_ok"], run["parse_error"] = False, str(e)
    if run["parse_ok"]:
        err = schema_error(v, obj)
        run["valid"], run["validation_error"] = err is None, err
        run["recall"] = recall(expected, obj) if expected is not None else None
    else:
        run["valid"] = False
    run["cut"] = cut
    run["ok"] = (not cut) and run["finish_reason"] == "stop" and run["parse_ok"] and run["valid"]
    run["status"] = "ok" if run["ok"] else ("cut" if cut else "FAIL")
    return run


def judge_free(run, v, expected):
    if "error" in run:
        run.update(status="error", strict_ok=False, lenient_ok=False, valid=False)
        return run
    run["cut"] = run["finish_reason"] in CUT
    try:
        obj = strict_loads(run["text"])
        run["strict_ok"] = True
    except ValueError:
        run["strict_ok"] = False
        obj = None
    try:
        obj, how = lenient_loads(run["text"])
        run["lenient_ok"], run["lenient_how"] = True, how
    except ValueError:
        run["lenient_ok"] = False
    if run["lenient_ok"]:
        err = schema_error(v, obj)
        run["valid"], run["validation_error"] = err is None, err
        run["recall"] = recall(expected, obj) if expected is not None else None
    else:
        run["valid"] = False
    run["status"] = "valid" if run["valid"] else (
        "json" if run["lenient_ok"] else ("cut" if run["cut"] else "text"))
    return run


def extraction(a, model, cases, failures):
    results = []
    for i, c in enumerate(cases):
        schema_arg = json.dumps(c["schema"], ensure_ascii=False, separators=(",", ":"))
        v = validator(c["schema"])
        con, free = [], []
        for rep in range(a.reps):
            modes = ["c", "f"] if (i + rep) % 2 == 0 else ["f", "c"]
            if a.no_free:
                modes = ["c"]
            for m in modes:
                if m == "c":
                    con.append(run_pocket(a, model, c["prompt"], ["--json-schema", schema_arg]))
                else:
                    free.append(run_pocket(a, model, c["prompt"], []))
        # every constrained rep must hold; the stats take the first answer and median timings
        judged = [judge_constrained(dict(r), v, c.get("expected")) for r in con]
        cr = median_timings(con)
        cr = judge_constrained(cr, v, c.get("expected"))
        fr = judge_free(median_timings(free), v, c.get("expected")) if free else {"status": "-"}
        for rep, j in enumerate(judged):
            if j["status"] in ("FAIL", "error"):
                kind = "constrained " + j["status"] + (f" (rep {rep + 1})" if a.reps > 1 else "")
                failures.append({"model": model, "case": c["id"], "kind": kind,
                                 "text": j.get("text"), "finish_reason": j.get("finish_reason"),
                                 "error": j.get("error") or j.get("parse_error")
                                 or j.get("validation_error")})
        results.append({"id": c["id"], "lang": c.get("lang"), "constrained": cr, "free": fr})
        print(f"  {c['id']:<26} constrained {cr['status']:<5} {fmt(cr.get('generated_tokens'), '{}'):>4} tok "
              f"{fmt(cr.get('decode_tok_per_s')):>6} tok/s | free {fr['status']:<5} "
              f"{fmt(fr.get('generated_tokens'), '{}'):>4} tok {fmt(fr.get('decode_tok_per_s')):>6} tok/s",
              file=sys.stderr, flush=True)
        if a.verbose:
            print(f"    C: {cr.get('text')!r}\n    F: {fr.get('text')!r}", file=sys.stderr)
    return results


def summarize_extraction(results):
    n = len(results)
    C = [r["constrained"] for r in results]
    F = [r["free"] for r in results]
    s = {
        "cases": n,
        "langs": dict(Counter(r["lang"] for r in results)),
        "constrained": {
            "ok": sum(bool(c.get("ok")) for c in C),
            "parse_pct": pct(sum(bool(c.get("parse_ok")) and not c.get("cut") and c.get("finish_reason") == "stop"
                                 for c in C), n),
            "valid_pct": pct(sum(bool(c.get("ok")) for c in C), n),
            "cut": sum(bool(c.get("cut")) for c in C),
            "errors": sum(c.get("status") == "error" for c in C),
            "failures": sum(c.get("status") == "FAIL" for c in C),
            "recall": med([c.get("recall") for c in C if c.get("ok")]),
            "nondeterministic": sum(not c.get("reps_identical", True) for c in C),
        },
        "free": {
            "strict_pct": pct(sum(bool(f.get("strict_ok")) for f in F), n),
            "lenient_pct": pct(sum(bool(f.get("lenient_ok")) for f in F), n),
            "valid_pct": pct(sum(bool(f.get("valid")) for f in F), n),
            "cut": sum(bool(f.get("cut")) for f in F),
            "errors": sum(f.get("status") == "error" for f in F),
            "recall": med([f.get("recall") for f in F if f.get("lenient_ok")]),
        },
    }
    for lang in sorted(s["langs"]):
        sub = [r for r in results if r["lang"] == lang]
        s["constrained"][f"valid_pct_{lang}"] = pct(sum(bool(r["constrained"].get("ok")) for r in sub), len(sub))
        s["free"][f"valid_pct_{lang}"] = pct(sum(bool(r["free"].get("valid")) for r in sub), len(sub))
    for key, rs in (("constrained", C), ("free", F)):
        ok = [r for r in rs if "error" not in r]
        s[key].update(
            decode_tok_per_s=med([r.get("decode_tok_per_s") for r in ok]),
            gen_ms=med([r.get("gen_ms") for r in ok]),
            wall_ms=med([r.get("wall_ms") for r in ok]),
            prefill_ms=med([r.get("prefill_ms") for r in ok]),
            generated_tokens=med([r.get("generated_tokens") for r in ok]),
        )
    forced = [c.get("forced_tokens") for c in C if c.get("forced_tokens") is not None]
    gen = [c.get("generated_tokens") or 0 for c in C if c.get("forced_tokens") is not None]
    s["constrained"]["forced_tokens"] = sum(forced) if forced else None
    s["constrained"]["forced_share_pct"] = pct(sum(forced), sum(gen)) if forced and sum(gen) else None
    c_tps, f_tps = s["constrained"]["decode_tok_per_s"], s["free"]["decode_tok_per_s"]
    s["decode_ratio"] = c_tps / f_tps if c_tps and f_tps else None
    s["free_skipped"] = all(f.get("status") == "-" for f in F)
    c_ms, f_ms = s["constrained"]["gen_ms"], s["free"]["gen_ms"]
    s["gen_ms_ratio"] = c_ms / f_ms if c_ms and f_ms else None
    return s


def print_extraction(model, s):
    c, f = s["constrained"], s["free"]
    langs = ", ".join(f"{v} {k}" for k, v in sorted(s["langs"].items()))
    print(f"\n== {model}: extraction, {s['cases']} cases ({langs}) ==")
    rows = [
        ("parse % (strict)", fmt(c["parse_pct"]), fmt(f["strict_pct"])),
        ("parse % (lenient)", "-", fmt(f["lenient_pct"])),
        ("schema-valid %", fmt(c["valid_pct"]), fmt(f["valid_pct"])),
    ]
    for lang in sorted(s["langs"]):
        rows.append((f"  schema-valid % {lang}", fmt(c.get(f"valid_pct_{lang}")), fmt(f.get(f"valid_pct_{lang}"))))
    rows += [
        ("cut at -n/context (count)", str(c["cut"]), str(f["cut"])),
        ("run errors (count)", str(c["errors"]), str(f["errors"])),
        ("stopped but invalid (count)", str(c["failures"]), "-"),
        ("median recall of expected", fmt(c["recall"], "{:.2f}"), fmt(f["recall"], "{:.2f}")),
        ("median generated tokens", fmt(c["generated_tokens"], "{:.0f}"), fmt(f["generated_tokens"], "{:.0f}")),
        ("forced tokens (sum, % of gen)",
         "-" if c["forced_tokens"] is None else f"{c['forced_tokens']} ({fmt(c['forced_share_pct'])}%)", "-"),
        ("median decode tok/s", fmt(c["decode_tok_per_s"]), fmt(f["decode_tok_per_s"])),
        ("  ratio constrained/free", fmt(s["decode_ratio"], "{:.3f}"), ""),
        ("median prefill ms", fmt(c["prefill_ms"], "{:.0f}"), fmt(f["prefill_ms"], "{:.0f}")),
        ("median gen ms (prefill+decode)", fmt(c["gen_ms"], "{:.0f}"), fmt(f["gen_ms"], "{:.0f}")),
        ("  ratio constrained/free", fmt(s["gen_ms_ratio"], "{:.3f}"), ""),
        ("median wall ms (subprocess)", fmt(c["wall_ms"], "{:.0f}"), fmt(f["wall_ms"], "{:.0f}")),
    ]
    if c["nondeterministic"]:
        rows.append(("reps with differing text", str(c["nondeterministic"]), ""))
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  {'constrained':>12}  {'free':>8}")
    if s["free_skipped"]:
        rows = [(name, cv, "-") for name, cv, _ in rows]
    for name, cv, fv in rows:
        print(f"{name:<{w}}  {cv:>12}  {fv:>8}")


# ----------------------------------------------------------------------------- tools

def load_tools(path):
    with open(path, encoding="utf-8") as f:
        tools = json.load(f)
    return {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in tools}


def call_parts(call):
    """(name, arguments, note) from a pocket tool call in OpenAI's shape ({"id", "type":
    "function", "function": {"name", "arguments": JSON text}}, as `run --json` and `serve` give
    it); any other shape is read where it can be and named in the note."""
    if not isinstance(call, dict):
        return None, None, "call is not an object"
    note = None
    fn = call.get("function") if isinstance(call.get("function"), dict) else None
    if fn is None or call.get("type") != "function" or not isinstance(call.get("id"), str):
        note = "not OpenAI's shape (id, type function, function)"
        fn = fn or call
    name, args = fn.get("name"), fn.get("arguments")
    if isinstance(args, str):
        try:
            args = strict_loads(args)
        except ValueError as e:
            return name, args, f"arguments string is not JSON: {e}"
    else:
        note = (note + "; " if note else "") + "arguments not given as a JSON string"
    return name, args, note


def judge_calls(run, params, validators):
    calls = run.get("tool_calls") or []
    judged = []
    for call in calls:
        name, args, note = call_parts(call)
        if name not in params:
            err = f"unknown tool {name!r}"
        elif not isinstance(args, dict):
            err = f"arguments are not an object: {args!r}"
        else:
            err = schema_error(validators[name], args)
        # `run --json` gives OpenAI's shape, as `serve` does: another one is a failure.
        err = err or (f"shape: {note}" if note else None)
        judged.append({"name": name, "arguments": args, "valid": err is None, "error": err, "note": note})
    return judged


def tools_pass(a, model, prompts, params, choice, failures):
    validators = {k: validator(v) for k, v in params.items()}
    out = []
    for p in prompts:
        run = run_pocket(a, model, p["prompt"], ["--tools", a.tools, "--tool-choice", choice])
        rec = {"id": p["id"], "expected": p.get("tool"), "choice": choice, **run}
        if "error" in run:
            rec["calls"] = []
            failures.append({"model": model, "case": p["id"], "kind": f"tools {choice} error",
                             "error": run["error"]})
        else:
            rec["calls"] = judge_calls(run, params, validators)
        first = rec["calls"][0] if rec["calls"] else None
        rec["called"] = bool(rec["calls"])
        rec["called_expected"] = bool(first) and first["name"] == p.get("tool")
        exp_calls = [c for c in rec["calls"] if c["name"] == p.get("tool")]
        rec["expected_args_valid"] = bool(exp_calls) and exp_calls[0]["valid"]
        rec["all_calls_valid"] = all(c["valid"] for c in rec["calls"])
        rec["cut"] = run.get("finish_reason") in CUT
        if choice == "required" and "error" not in run and not rec["cut"]:
            if not rec["calls"]:
                failures.append({"model": model, "case": p["id"], "kind": "required: no tool call",
                                 "text": run.get("text")})
            for c in rec["calls"]:
                if not c["valid"]:
                    failures.append({"model": model, "case": p["id"], "kind": "required: invalid call",
                                     "text": run.get("text"), "call": {"name": c["name"], "arguments": c["arguments"]},
                                     "error": c["error"]})
        calls_s = ", ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})"
                            + ("" if c["valid"] else " INVALID") for c in rec["calls"]) or "no call"
        print(f"  [{choice}] {p['id']} want {p.get('tool')}: {calls_s}"[:200], file=sys.stderr, flush=True)
        out.append(rec)
    return out


def summarize_tools(recs):
    need = [r for r in recs if r["expected"]]
    none = [r for r in recs if not r["expected"]]
    ok = [r for r in recs if "error" not in r]
    return {
        "need_tool": len(need),
        "need_none": len(none),
        "called_pct": pct(sum(r["called"] for r in need), len(need)),
        "called_expected_pct": pct(sum(r["called_expected"] for r in need), len(need)),
        "expected_args_valid_pct": pct(sum(r["expected_args_valid"] for r in need), len(need)),
        "all_calls_valid_pct": pct(sum(r["all_calls_valid"] for r in recs if r["called"]),
                                   sum(r["called"] for r in recs)),
        "no_tool_but_called_pct": pct(sum(r["called"] for r in none), len(none)),
        "cut": sum(r["cut"] for r in recs),
        "errors": sum("error" in r for r in recs),
        "decode_tok_per_s": med([r.get("decode_tok_per_s") for r in ok]),
        "gen_ms": med([r.get("gen_ms") for r in ok]),
        "wall_ms": med([r.get("wall_ms") for r in ok]),
    }


def print_tools(model, passes):
    print(f"\n== {model}: tool calls ==")
    cols = list(passes)
    rows = [
        ("prompts needing a tool", "need_tool", "{:.0f}"),
        ("  called a tool %", "called_pct", "{:.1f}"),
        ("  first call = expected tool %", "called_expected_pct", "{:.1f}"),
        ("  expected tool's args valid %", "expected_args_valid_pct", "{:.1f}"),
        ("prompts needing none", "need_none", "{:.0f}"),
        ("  called a tool anyway %", "no_tool_but_called_pct", "{:.1f}"),
        ("every call's args valid %", "all_calls_valid_pct", "{:.1f}"),
        ("cut at -n (count)", "cut", "{:.0f}"),
        ("run errors (count)", "errors", "{:.0f}"),
        ("median decode tok/s", "decode_tok_per_s", "{:.1f}"),
        ("median gen ms", "gen_ms", "{:.0f}"),
        ("median wall ms", "wall_ms", "{:.0f}"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  " + "  ".join(f"{c:>10}" for c in cols))
    for name, key, spec in rows:
        print(f"{name:<{w}}  " + "  ".join(f"{fmt(passes[c].get(key), spec):>10}" for c in cols))


# ----------------------------------------------------------------------------- self-test

FEATURES = ["type", "type-array", "null-type", "properties", "required", "additionalProperties:false",
            "enum", "const", "anyOf", "oneOf", "items", "minItems", "maxItems", "minLength",
            "maxLength", "pattern", "int-min/max", "num-min/max", "nested-object", "array-of-objects",
            "non-ascii-keys", "non-ascii-values"]


def _nonascii(x):
    return isinstance(x, str) and any(ord(ch) > 127 for ch in x)


def _types(s):
    t = s.get("type")
    return t if isinstance(t, list) else ([t] if t else [])


def _is_object(s):
    return "object" in _types(s) or "properties" in s


def schema_features(schema, expected=None):
    found = set()
    problems = []

    def walk(s, where, in_object):
        if not isinstance(s, dict):
            return
        types = _types(s)
        if "type" in s:
            found.add("type")
        if isinstance(s.get("type"), list):
            found.add("type-array")
        if "null" in types:
            found.add("null-type")
        for k in ("properties", "required", "enum", "const", "anyOf", "oneOf", "items", "minItems",
                  "maxItems", "minLength", "maxLength", "pattern"):
            if k in s:
                found.add(k)
        if s.get("additionalProperties") is False:
            found.add("additionalProperties:false")
        if "minimum" in s or "maximum" in s:
            if "integer" in types:
                found.add("int-min/max")
            if "number" in types:
                found.add("num-min/max")
        if any(_nonascii(v) for v in s.get("enum", [])) or _nonascii(s.get("const")):
            found.add("non-ascii-values")
        obj = _is_object(s)
        if obj:
            if in_object:
                found.add("nested-object")
            if s.get("additionalProperties") is not False:
                problems.append(f"{where}: object without additionalProperties: false")
            for k in s.get("required", []):
                if k not in s.get("properties", {}):
                    problems.append(f"{where}: required {k!r} is not a property")
        if "string" in types and not any(k in s for k in ("enum", "const", "pattern")):
            if s.get("maxLength") is None or s["maxLength"] > 60:
                problems.append(f"{where}: free string without maxLength <= 60")
        if "array" in types:
            if s.get("maxItems") is None or s["maxItems"] > 5:
                problems.append(f"{where}: array without maxItems <= 5")
            if isinstance(s.get("items"), dict) and _is_object(s["items"]):
                found.add("array-of-objects")
        for k, sub in s.get("properties", {}).items():
            if _nonascii(k):
                found.add("non-ascii-keys")
            walk(sub, f"{where}/{k}", in_object or obj)
        if isinstance(s.get("items"), dict):  # an array's objects count as array-of-objects
            walk(s["items"], f"{where}[]", False)
        for kw in ("anyOf", "oneOf"):
            for j, b in enumerate(s.get(kw, [])):
                walk(b, f"{where}/{kw}[{j}]", in_object)
        if "oneOf" in s:
            problems.extend(_oneof_exclusive(s["oneOf"], where))

    walk(schema, "", False)
    if expected is not None:
        def vals(x):
            if isinstance(x, dict):
                for v in x.values():
                    yield from vals(v)
            elif isinstance(x, list):
                for v in x:
                    yield from vals(v)
            else:
                yield x
        if any(_nonascii(v) for v in vals(expected)):
            found.add("non-ascii-values")
    return found, problems


def _oneof_exclusive(branches, where):
    """Each pair of branches must disagree on a const of a property both require."""
    out = []
    for i in range(len(branches)):
        for j in range(i + 1, len(branches)):
            a, b = branches[i], branches[j]
            common = set(a.get("required", [])) & set(b.get("required", []))
            if not any("const" in a["properties"][k] and "const" in b["properties"][k]
                       and a["properties"][k]["const"] != b["properties"][k]["const"] for k in common):
                out.append(f"{where}/oneOf: branches {i} and {j} are not told apart by a required const")
    return out


def self_test(a):
    errors = []
    cases = read_jsonl(a.cases or DEFAULT_CASES)
    ids = [c.get("id") for c in cases]
    if len(set(ids)) != len(ids):
        errors.append(f"duplicate case ids: {[k for k, v in Counter(ids).items() if v > 1]}")
    coverage = {f: [] for f in FEATURES}
    langs = Counter()
    for c in cases:
        cid = c.get("id")
        for k in ("id", "lang", "prompt", "schema", "expected"):
            if k not in c:
                errors.append(f"{cid}: missing {k!r}")
        if c.get("lang") not in ("en", "zh"):
            errors.append(f"{cid}: lang {c.get('lang')!r}")
        langs[c.get("lang")] += 1
        if "JSON" not in c.get("prompt", ""):
            errors.append(f"{cid}: the prompt does not ask for JSON")
        try:
            Draft202012Validator.check_schema(c["schema"])
        except jsonschema.exceptions.SchemaError as e:
            errors.append(f"{cid}: bad schema: {e.message}")
            continue
        v = validator(c["schema"])
        err = schema_error(v, c["expected"])
        if err:
            errors.append(f"{cid}: expected answer fails its schema: {err}")
        # the schema must bite: an extra key and a missing required key both fail
        if isinstance(c["expected"], dict):
            extra = dict(c["expected"], zz_extra_key=1)
            if v.is_valid(extra):
                errors.append(f"{cid}: an extra top-level key passes")
            for k in c["schema"].get("required", [])[:1]:
                missing = {kk: vv for kk, vv in c["expected"].items() if kk != k}
                if v.is_valid(missing):
                    errors.append(f"{cid}: dropping required {k!r} passes")
        # the expected answer round-trips through the strict parser
        strict_loads(json.dumps(c["expected"], ensure_ascii=False))
        feats, problems = schema_features(c["schema"], c["expected"])
        errors.extend(f"{cid}{p}" for p in problems)
        for f in feats:
            coverage[f].append(cid)
    if langs["zh"] < 6:
        errors.append(f"only {langs['zh']} Chinese cases")
    for f, who in coverage.items():
        if len(who) < 2:
            errors.append(f"feature {f} is covered by {len(who)} case(s)")

    # the parsers themselves
    assert strict_loads(' {"a": 1} \n') == {"a": 1}
    for bad in ('{"a": NaN}', '{"a": 1, "a": 2}', '{"a": 1} x', '```json\n{"a": 1}\n```', ''):
        try:
            strict_loads(bad)
            errors.append(f"strict_loads accepted {bad!r}")
        except ValueError:
            pass
    assert lenient_loads('Sure!\n```json\n{"a": [1, 2]}\n```\nDone.') == ({"a": [1, 2]}, "fence")
    assert lenient_loads('Here: {"a": {"b": "}"}} and more') == ({"a": {"b": "}"}}, "brace")
    assert recall({"a": [1, 2], "b": "X y"}, {"b": "x  Y", "a": [2]}) == 2 / 3

    # intents
    ip = a.intents or DEFAULT_INTENTS
    if os.path.exists(ip):
        items = read_jsonl(ip)
        if len(items) != 100:
            errors.append(f"intents: {len(items)} items, not 100")
        if len({it["id"] for it in items}) != len(items):
            errors.append("intents: duplicate ids")
        for it in items:
            if it.get("choices") != INTENT_LABELS:
                errors.append(f"intents {it.get('id')}: choices differ from the 10 labels")
            if it.get("answer") not in INTENT_LABELS:
                errors.append(f"intents {it.get('id')}: answer {it.get('answer')!r}")
            if not it.get("question"):
                errors.append(f"intents {it.get('id')}: empty question")
        per = Counter(it.get("answer") for it in items)
        if any(not 8 <= per[l] <= 12 for l in INTENT_LABELS):
            errors.append(f"intents: unbalanced labels {dict(per)}")
        zh = sum(any('\u4e00' <= ch <= '\u9fff' for ch in it["question"]) for it in items)
        if zh < 12:
            errors.append(f"intents: only {zh} Chinese questions")
        qs = [it["question"] for it in items]
        if len(set(qs)) != len(qs):
            errors.append("intents: duplicate questions")
        print(f"intents: {len(items)} items, {zh} Chinese, per label {dict(per)}")

    # tools
    tp = a.tools or DEFAULT_TOOLS
    if os.path.exists(tp):
        with open(tp, encoding="utf-8") as f:
            tools = json.load(f)
        names = []
        for t in tools:
            fn = t.get("function", {})
            names.append(fn.get("name"))
            if t.get("type") != "function" or not fn.get("name") or not fn.get("description"):
                errors.append(f"tools: malformed entry {t!r}"[:200])
                continue
            p = fn.get("parameters", {})
            try:
                Draft202012Validator.check_schema(p)
            except jsonschema.exceptions.SchemaError as e:
                errors.append(f"tools {fn['name']}: bad parameters schema: {e.message}")
            if p.get("additionalProperties") is not False or "required" not in p:
                errors.append(f"tools {fn['name']}: parameters need required and additionalProperties: false")
        if names != ["get_weather", "set_alarm", "send_message", "search_web"]:
            errors.append(f"tools: names {names}")
        params = load_tools(tp)
        vs = {k: validator(v) for k, v in params.items()}
        samples = [("get_weather", {"city": "Paris"}, True), ("get_weather", {"city": "北京", "unit": "celsius"}, True),
                   ("get_weather", {"city": "Paris", "unit": "kelvin"}, False), ("get_weather", {}, False),
                   ("set_alarm", {"time": "07:30", "label": "gym"}, True), ("set_alarm", {"time": "7:30"}, False),
                   ("set_alarm", {"time": "24:00"}, False), ("set_alarm", {"time": "23:59", "x": 1}, False),
                   ("send_message", {"contact": "Anna", "text": "Late!"}, True),
                   ("send_message", {"contact": "Anna"}, False),
                   ("search_web", {"query": "Louvre hours"}, True), ("search_web", {"query": ""}, False)]
        for name, args, want in samples:
            if vs[name].is_valid(args) != want:
                errors.append(f"tools {name}: {args} should be {'valid' if want else 'invalid'}")
        pp = a.tool_prompts or DEFAULT_TOOL_PROMPTS
        if os.path.exists(pp):
            prompts = read_jsonl(pp)
            per = Counter(p.get("tool") for p in prompts)
            if len(prompts) != 24 or per[None] != 8 or any(per[n] != 4 for n in names):
                errors.append(f"tool prompts: {len(prompts)} prompts, per tool {dict(per)}")
            for p in prompts:
                if p.get("tool") is not None and p["tool"] not in names:
                    errors.append(f"tool prompts {p.get('id')}: unknown tool {p['tool']!r}")
            print(f"tools: {names}; tool prompts: {len(prompts)}, per tool {dict(per)}")

    print(f"extraction: {len(cases)} cases ({dict(langs)})")
    print("\n| feature | cases |\n| --- | --- |")
    for f in FEATURES:
        print(f"| {f} | {len(coverage[f])}: {', '.join(coverage[f])} |")
    print("\n| case | features |\n| --- | --- |")
    for c in cases:
        feats, _ = schema_features(c["schema"], c["expected"])
        print(f"| {c['id']} | {', '.join(f for f in FEATURES if f in feats)} |")
    if errors:
        print("\nSELF-TEST FAILED:")
        for e in errors:
            print("  " + e)
        return 1
    print("\nself-test passed")
    return 0


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pocket", default=os.path.join(ROOT, "target", "release", "pocket"))
    ap.add_argument("--model", action="append", default=[], help="repeatable")
    ap.add_argument("--cases", help=f"extraction JSONL [default without --tools: {os.path.relpath(DEFAULT_CASES, ROOT)}]")
    ap.add_argument("--only", action="append", default=[], help="case or prompt ids (repeatable, comma-separated)")
    ap.add_argument("--limit", type=int, help="first N cases / prompts only")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=1, help="runs of each case and mode (timings: median)")
    ap.add_argument("--tools", help="OpenAI tools array (JSON file)")
    ap.add_argument("--tool-prompts", help="JSONL of {id, prompt, tool}")
    ap.add_argument("--tool-choice", default="auto", help="choice for the first tools pass [auto]")
    ap.add_argument("--no-required", action="store_true", help="skip the --tool-choice required pass")
    ap.add_argument("--no-free", action="store_true",
                    help="skip the free (unconstrained) answers, which are reported, not checked")
    ap.add_argument("--intents", help="intents JSONL (checked by --self-test only)")
    ap.add_argument("--pocket-args", default="", help="extra arguments for every pocket run, e.g. '-t 2'")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per pocket run")
    ap.add_argument("--json-out", help="write every answer and the summaries here")
    ap.add_argument("--self-test", action="store_true",
                    help="check the data files (schemas, expected answers, coverage) and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every answer")
    a = ap.parse_args()
    a.pocket_args = shlex.split(a.pocket_args)
    if a.self_test:
        return self_test(a)
    if not a.model:
        ap.error("--model is required (or --self-test)")
    if a.reps < 1 or a.max_tokens < 1:
        ap.error("--reps and --max-tokens must be at least 1")
    if not (os.path.exists(a.pocket) or "/" not in a.pocket):
        ap.error(f"no pocket binary at {a.pocket}")
    if a.tools and not a.tool_prompts:
        a.tool_prompts = DEFAULT_TOOL_PROMPTS
    cases_path = a.cases or (None if a.tools else DEFAULT_CASES)
    only = {x for o in a.only for x in o.split(",") if x}

    def pick(rows):
        if only:
            rows = [r for r in rows if r["id"] in only]
        return rows[:a.limit] if a.limit else rows

    cases = pick(read_jsonl(cases_path)) if cases_path else []
    prompts = pick(read_jsonl(a.tool_prompts)) if a.tools else []
    params = load_tools(a.tools) if a.tools else {}

    failures = []
    report = {"args": {k: v for k, v in vars(a).items()}, "models": {}}
    for model in a.model:
        rep = report["models"][model] = {}
        if cases:
            print(f"{model}: {len(cases)} extraction cases", file=sys.stderr)
            res = extraction(a, model, cases, failures)
            rep["extraction"] = {"summary": summarize_extraction(res), "cases": res}
        if prompts:
            passes, recs = {}, {}
            recs[a.tool_choice] = tools_pass(a, model, prompts, params, a.tool_choice, failures)
            passes[a.tool_choice] = summarize_tools(recs[a.tool_choice])
            if not a.no_required and a.tool_choice != "required":
                need = [p for p in prompts if p.get("tool")]
                recs["required"] = tools_pass(a, model, need, params, "required", failures)
                passes["required"] = summarize_tools(recs["required"])
            rep["tools"] = {"summary": passes, "prompts": recs}
    for model, rep in report["models"].items():
        if "extraction" in rep:
            print_extraction(model, rep["extraction"]["summary"])
        if "tools" in rep:
            print_tools(model, rep["tools"]["summary"])
    report["failures"] = failures
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
            f.write("\n")
    if failures:
        print(f"\n{len(failures)} FAILURE(S):")
        for f in failures:
            print(f"  {f['model']} {f['case']}: {f['kind']}")
            if f.get("text") is not None:
                print(f"    text: {f['text']!r}"[:1000])
            if f.get("call") is not None:
                print(f"    call: {json.dumps(f['call'], ensure_ascii=False)}"[:1000])
            if f.get("error"):
                print(f"    error: {f['error']}"[:1000])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
