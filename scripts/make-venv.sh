#!/usr/bin/env bash
# Creates the Python environment used to make fixtures and reference outputs with Hugging Face
# transformers (and peft, for the LoRA references): torch (PyPI's build is the CUDA one, ~5.6 GB installed; it runs on CPU),
# transformers, tokenizers, gguf. Never needed by CI or by `cargo test`.
# Usage: scripts/make-venv.sh            (creates $POCKET_VENV, default ./.venv)
set -euo pipefail
VENV="${POCKET_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, transformers, gguf, tokenizers, accelerate, compressed_tensors, peft" 2>/dev/null; then
  echo "installing torch + transformers into $VENV (several GB, a few minutes)" >&2
  "$VENV/bin/pip" install -q "torch>=2.4" "transformers>=5.0,<6" "tokenizers>=0.22" "gguf>=0.17" safetensors numpy jinja2 accelerate "compressed-tensors==0.20.1" "peft==0.21.2"
fi
echo "$VENV"
