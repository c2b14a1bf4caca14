#!/usr/bin/env bash
# The cached venv with the pinned llama-cpp-python, compiled from source for this CPU
# (llama.cpp itself, used as the peer in checks and benchmarks), plus gguf-py. Prints its path.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${POCKET_LLAMACPP_VENV:-$ROOT/.venv-llamacpp}"
if ! "$VENV/bin/python" -c "import llama_cpp, gguf, numpy" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy "gguf>=0.17" >&2
  CMAKE_ARGS="-DGGML_NATIVE=ON" "$VENV/bin/pip" install -q --no-binary llama-cpp-python "llama-cpp-python==0.3.36" >&2
fi
echo "$VENV"
