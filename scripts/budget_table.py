#!/usr/bin/env python3
"""pocket's size-budget search (`export --size`) against llama.cpp's best 4- and 5-bit types at
the same file size, from the same full-precision GGUF and the same calibration text.

For each llama.cpp type (every tensor at that type, the embedding and output included:
`--token-embedding-type`/`--output-tensor-type` matched), build it with `llama-imatrix` +
`llama-quantize`, then build pocket's `.pocket` with `--size` equal to that file's size, and
score every build by its KL divergence from the source over GSM8K test tokens in one engine,
pocket's f32 path (`eval ppl --baseline SOURCE --activations f32 --kv f32`).
Usage: budget_table.py POCKET_BIN LLAMA_BIN_DIR SOURCE.gguf CALIB.txt SCORE.txt OUT_DIR [TYPES...]
Environment: CALIB_TOKENS (default 2048: calibration tokens for both llama-imatrix and pocket),
POCKET_EXPORT_ARGS (more flags for pocket's export, e.g. --gptq).
"""
import json
import os
import subprocess
import sys

CALIB_TOKENS = int(os.environ.get("CALIB_TOKENS", "2048"))
EXTRA = os.environ.get("POCKET_EXPORT_ARGS", "").split()
SCORE_TOKENS = 4096


def run(*args, **kw):
    print("+", " ".join(map(str, args)), file=sys.stderr, flush=True)
    return subprocess.run(list(map(str, args)), check=True, **kw)


def score(pocket, build, source, text):
    out = run(pocket, "eval", "ppl", build, "--baseline", source, "--text", text,
              "--max-tokens", SCORE_TOKENS, "--ctx", 512, "--activations", "f32", "--kv", "f32",
              "--baseline-activations", "f32", "--baseline-kv", "f32", "--json",
              capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["kld_mean"], r["top1_agree"], r["tokens"]


def main():
    pocket, bindir, source, calib, text, out = sys.argv[1:7]
    types = sys.argv[7:] or ["Q4_0", "IQ4_NL", "Q4_1", "Q5_0", "Q5_1"]
    os.makedirs(out, exist_ok=True)
    params = None
    imat = os.path.join(out, "imatrix.gguf")
    if not os.path.exists(imat):
        run(os.path.join(bindir, "llama-imatrix"), "-m", source, "-f", calib, "-o", imat,
            "-c", 512, "--chunks", CALIB_TOKENS // 512, "-t", 2, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    rows = []
    for t in types:
        lc = os.path.join(out, f"llama-{t}.gguf")
        if not os.path.exists(lc):
            try:
                run(os.path.join(bindir, "llama-quantize"), "--imatrix", imat,
                    "--token-embedding-type", t.lower(), "--output-tensor-type", t.lower(),
                    source, lc, t, 2, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except subprocess.CalledProcessError as e:
                # IQ4_XS needs rows of a multiple of 256 values, for instance.
                print(f"{t}: llama-quantize failed ({e.returncode}); left out", file=sys.stderr)
                if os.path.exists(lc):
                    os.remove(lc)
                continue
        size = os.path.getsize(lc)
        pk = os.path.join(out, f"pocket-{t}.pocket")
        if not os.path.exists(pk):
            # Each tensor's effect is measured once per source and reused for every size.
            run(pocket, "export", source, "-o", pk, "--size", f"{size}B", "--calib", calib,
                "--calib-tokens", CALIB_TOKENS, "--sensitivity",
                os.path.join(out, "sensitivity.json"), "--json", *EXTRA, stdout=subprocess.DEVNULL)
        if params is None:
            info = json.loads(run(pocket, "inspect", pk, "--json", capture_output=True,
                                  text=True).stdout)
            params = info.get("parameters")
        lk = score(pocket, lc, source, text)
        pkk = score(pocket, pk, source, text)
        rows.append((t, size, os.path.getsize(pk), lk, pkk))
        print(t, size, lk, pkk, file=sys.stderr, flush=True)
    print("| size (MB) | bits/param | llama.cpp type + imatrix | its KL (top-1) | pocket `--size` KL (top-1) | pocket / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for t, size, psize, lk, pkk in rows:
        bpw = size * 8 / params if params else float("nan")
        print(f"| {size/1e6:.2f} ({psize/1e6:.2f}) | {bpw:.2f} | {t} | {lk[0]:.4f} ({lk[1]*100:.1f} %) | "
              f"{pkk[0]:.4f} ({pkk[1]*100:.1f} %) | {pkk[0]/lk[0]:.2f}× |")


if __name__ == "__main__":
    main()
