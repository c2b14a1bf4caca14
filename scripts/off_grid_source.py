#!/usr/bin/env python3
"""Moves a dequantized model's weights off their old quantization grid, for fair quantizer
comparisons (docs/quantization.md, "Size budget").

Every model here is a dequantized 4-bit GGUF: its weights lie on the grid of the type it was
shipped in (SmolLM2's Q4_1: 32-value blocks, asymmetric), and a quantizer that happens to
find that grid again loses almost nothing there, which says nothing about how it does on a
full-precision model. This adds, to every 2-D tensor of a BF16 GGUF, Gaussian noise of
0.3 times each 32-value block's 4-bit step ((max - min) / 15), seeded, in place on a copy.
Usage: off_grid_source.py IN_BF16.gguf OUT.gguf   (needs gguf-py and numpy)
"""
import shutil
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

src, out = sys.argv[1], sys.argv[2]
shutil.copyfile(src, out)
reader = GGUFReader(out, "r+")
rng = np.random.default_rng(20261206)
moved = 0
for t in reader.tensors:
    if len(t.shape) != 2:
        continue
    if t.tensor_type != GGMLQuantizationType.BF16:
        sys.exit(f"{out}: tensor {t.name} is {t.tensor_type.name}, this takes BF16 only")
    raw = t.data.reshape(-1).view(np.uint16)
    n = raw.size
    if n % 32:
        sys.exit(f"{out}: tensor {t.name} has {n} values, not a multiple of 32")
    x = (raw.astype(np.uint32) << 16).view(np.float32).reshape(-1, 32)
    step = (x.max(axis=1, keepdims=True) - x.min(axis=1, keepdims=True)) / 15
    y = x + rng.standard_normal(x.shape).astype(np.float32) * (0.3 * step)
    # Round to nearest even bf16.
    u = y.reshape(-1).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    raw[:] = u.astype(np.uint16)
    moved += 1
reader.data.flush()
print(f"{out}: {moved} tensors moved off their grid", file=sys.stderr)
