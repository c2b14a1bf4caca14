#!/usr/bin/env bash
# The cached venv with the pinned llama-cpp-python, compiled from source for this CPU
# (llama.cpp itself, used as the peer in checks and benchmarks), plus gguf-py. Prints its path.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# LLAMACPP_ISA=avx2 builds an AVX2-only llama.cpp (no AVX-512) in its own venv: the peer for
# pocket's AVX2 kernels (POCKET_ISA=avx2) on a machine that has AVX-512.
if [ "${LLAMACPP_ISA:-native}" = avx2 ]; then
  VENV="${POCKET_LLAMACPP_VENV:-$ROOT/.venv-llamacpp-avx2}"
  FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"
else
  VENV="${POCKET_LLAMACPP_VENV:-$ROOT/.venv-llamacpp}"
  FLAGS="-DGGML_NATIVE=ON"
fi
if ! "$VENV/bin/python" -c "import llama_cpp, gguf, numpy" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy "gguf>=0.17" >&2
  # --no-cache-dir: a wheel cached from the other build would be reused whatever CMAKE_ARGS say.
  CMAKE_ARGS="$FLAGS" "$VENV/bin/pip" install -q --no-cache-dir --no-binary llama-cpp-python \
    "llama-cpp-python==0.3.36" >&2
fi
echo "$VENV"
