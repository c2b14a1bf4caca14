#!/usr/bin/env bash
# Verifies pocket's GGUF export against the real llama.cpp (issue #5): for each exported file,
# llama.cpp (via the pinned llama-cpp-python, compiled from source for this CPU) and pocket each
# compute perplexity on the same tokens and greedy-generate 32 tokens for three chat prompts; a
# table compares them. Also reads every file back with gguf-py. Slow (first run compiles
# llama.cpp): not part of `cargo test`. Usage: scripts/check-gguf-llamacpp.sh [FILE.gguf ...]
# (default: the SmolLM2 exports F16, Q8_0, Q4_0, Q4_1, IQ4_NL and the MNN-shape exports, if present).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$("$ROOT/scripts/llamacpp-venv.sh")"
cd "$ROOT"
cargo build --release --locked --quiet
DATA="$("$ROOT/scripts/fetch-eval-data.sh")"
if [ $# -eq 0 ]; then
  MODEL="$("$ROOT/scripts/fetch-hf-models.sh" smollm2)"
  OUT="$ROOT/models/gguf-check"
  mkdir -p "$OUT"
  for q in f16 q8_0 q4_0 q4_1 iq4_nl; do
    [ -f "$OUT/smollm2-$q.gguf" ] || target/release/pocket export "$MODEL" -o "$OUT/smollm2-$q.gguf" --format gguf --quant "$q"
    set -- "$@" "$OUT/smollm2-$q.gguf"
  done
fi
"$VENV/bin/python" "$ROOT/scripts/check_gguf_llamacpp.py" "$ROOT/target/release/pocket" "$DATA/gsm8k/test.txt" "$@"
