#!/usr/bin/env bash
# The environment with Hugging Face transformers and peft (pyproject.toml's `hf` extra: torch,
# PyPI's CUDA build, ~5.6 GB installed, running on CPU; transformers, tokenizers, gguf, peft, …),
# used to make fixtures and reference outputs. Never needed by CI or by `cargo test`. Prints its
# directory; scripts call `"$(scripts/make-venv.sh)/bin/python"`, or run
# `scripts/py hf SCRIPT.py` directly.
# Usage: scripts/make-venv.sh     ($POCKET_VENV, default ./.venv: the project's one environment)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${POCKET_VENV:-}" ]; then
  export UV_PROJECT_ENVIRONMENT="$POCKET_VENV"
fi
exec "$ROOT/scripts/py" hf --env
