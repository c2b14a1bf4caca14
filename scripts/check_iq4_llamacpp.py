#!/usr/bin/env python3
"""pocket's IQ4_NL and IQ4_XS writers against llama.cpp's own `llama-quantize`, byte for byte.

Both quantize the same full-precision GGUF without an importance matrix (pocket: `export
--format gguf --quant iq4_nl|iq4_xs --calib none`; llama.cpp: `llama-quantize --pure` with the
embedding/output at Q8_0, as pocket writes them). IQ4_XS's rows that are not a multiple of 256
fall back to IQ4_NL on both sides. Every tensor's type and bytes must be equal; the script
prints a count per type and exits 1 on any difference.
Usage: check_iq4_llamacpp.py POCKET_BIN LLAMA_BIN_DIR SOURCE.gguf WORK_DIR  (needs gguf-py)
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader


def main():
    pocket, bindir, source, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    bad = 0
    for ty in ["IQ4_NL", "IQ4_XS"]:
        p, l = os.path.join(work, f"pocket-{ty}.gguf"), os.path.join(work, f"llama-{ty}.gguf")
        subprocess.run([pocket, "export", source, "-o", p, "--format", "gguf", "--quant", ty.lower(),
                        "--calib", "none"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(bindir, "llama-quantize"), "--pure", "--token-embedding-type", "q8_0",
                        "--output-tensor-type", "q8_0", source, l, ty, "2"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        a, b = GGUFReader(p), GGUFReader(l)
        theirs = {t.name: t for t in b.tensors}
        counts = {}
        for t in a.tensors:
            u = theirs.pop(t.name, None)
            same = u is not None and t.tensor_type == u.tensor_type and np.array_equal(
                np.asarray(t.data).view(np.uint8), np.asarray(u.data).view(np.uint8))
            c = counts.setdefault(t.tensor_type.name, [0, 0])
            c[0 if same else 1] += 1
            if not same:
                bad += 1
                print(f"{ty}: {t.name} differs", file=sys.stderr)
        bad += len(theirs)
        for name in theirs:
            print(f"{ty}: {name} only in llama.cpp's file", file=sys.stderr)
        print(ty, ", ".join(f"{k}: {v[0]} identical, {v[1]} different" for k, v in sorted(counts.items())))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
