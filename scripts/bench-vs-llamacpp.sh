#!/usr/bin/env bash
# pocket against llama.cpp and MNN on the same weights, same machine, same run (issue #9).
#
# The model is the MNN-Pocket-0.3B-shape random checkpoint (fixtures/make_fixtures.py
# --mnn-shape), exported by pocket itself to .pocket Q4 (block 64) and Q8 and to GGUF Q4_0 and
# Q8_0. llama.cpp is the pinned llama-cpp-python compiled from source with native CPU flags, in
# a cached venv. MNN is MNN==3.6.1 from PyPI (pyproject.toml's `mnn` extra, via scripts/py) running
# pocket's MNN export of the Q4 file (the same int4 codes and scales, byte for byte), in its
# default mode (int8 activations). Engines alternate, ROUNDS rounds, each round one repetition
# of every figure; the table shows medians over the rounds and the ratios pocket/llama.cpp (its
# best flash-attention setting per figure) and pocket/MNN. MNN=0 leaves MNN out.
#
# GGUF mode (issue #20): `scripts/bench-vs-llamacpp.sh gguf [ROUNDS] [FILE.gguf ...]` runs
# people's GGUF files as downloaded (default: the SmolLM2 Q4_1, Qwen2.5-Coder-0.5B Q4_K_M and
# Gemma 3 270M Q4_K_M files of scripts/fetch-models.sh), pocket straight from the file against
# llama.cpp on the same file, alternating, and prints pocket / llama.cpp per file and figure.
#
# Usage: scripts/bench-vs-llamacpp.sh [ROUNDS=5]   env: THREADS (2), P (512), N (128), D (512),
#   ISA (native | avx2)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" = gguf ]; then
  shift
  ROUNDS="${1:-5}"
  [ $# -gt 0 ] && shift
  THREADS="${THREADS:-2}" P="${P:-512}" N="${N:-128}" D="${D:-512}"
  VENV="$("$ROOT/scripts/llamacpp-venv.sh")"
  cd "$ROOT"
  cargo build --release --locked --quiet --bin pocket
  if [ $# -eq 0 ]; then
    for m in smollm2 qwen-coder gemma3; do set -- "$@" "$("$ROOT/scripts/fetch-models.sh" "$m")"; done
  fi
  mkdir -p "$ROOT/models/bench"
  LOG="$ROOT/models/bench/runs-gguf.jsonl"
  : > "$LOG"
  for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    for f in "$@"; do
      w="$(basename "$f" .gguf)"
      echo "{\"engine\":\"pocket\",\"weights\":\"$w\",\"run\":$("$ROOT/target/release/pocket" bench "$f" --pp "$P" -n "$N" --depth "$D" -t "$THREADS" --reps 1 --json)}" >> "$LOG"
      for fa in 0 1; do
        echo "{\"engine\":\"llama.cpp\",\"weights\":\"$w\",\"fa\":$fa,\"run\":$("$VENV/bin/python" "$ROOT/scripts/bench_llamacpp.py" "$f" "$P" "$N" "$D" "$THREADS" 1 "$fa")}" >> "$LOG"
      done
    done
  done
  exec python3 "$ROOT/scripts/bench_table.py" "$LOG" --same-file
fi
ROUNDS="${1:-5}" THREADS="${THREADS:-2}" P="${P:-512}" N="${N:-128}" D="${D:-512}"
# ISA=avx2: what an AVX2-only machine gets, on this one: pocket capped to its AVX2 kernels
# against llama.cpp built without AVX-512 (its own venv).
ISA="${ISA:-native}"
if [ "$ISA" = avx2 ]; then
  export POCKET_ISA=avx2 LLAMACPP_ISA=avx2
fi
VENV="$("$ROOT/scripts/llamacpp-venv.sh")"
cd "$ROOT"
cargo build --release --locked --quiet
POCKET="$ROOT/target/release/pocket"
SRC="$ROOT/models/mnn-pocket-shape"
if [ ! -f "$SRC/config.json" ]; then
  "$ROOT/scripts/py" hf "$ROOT/fixtures/make_fixtures.py" --mnn-shape "$SRC" >&2
fi
OUT="$ROOT/models/bench"
mkdir -p "$OUT"
# A .pocket from before format version 2 (row-major, repacked at every load) is made again.
current() { [ -f "$1" ] && [ "$(od -An -tu4 -j8 -N4 "$1" | tr -d ' ')" -ge 2 ]; }
current "$OUT/q4.pocket" || "$POCKET" export "$SRC" -o "$OUT/q4.pocket" >&2
current "$OUT/q8.pocket" || "$POCKET" export "$SRC" -o "$OUT/q8.pocket" --quant q8 >&2
[ -f "$OUT/q4_0.gguf" ] || "$POCKET" export "$SRC" -o "$OUT/q4_0.gguf" --format gguf --quant q4_0 >&2
[ -f "$OUT/q8_0.gguf" ] || "$POCKET" export "$SRC" -o "$OUT/q8_0.gguf" --format gguf --quant q8_0 >&2
[ "$OUT/q4-mnn/llm.mnn.weight" -nt "$OUT/q4.pocket" ] ||
  "$POCKET" export "$OUT/q4.pocket" --format mnn -o "$OUT/q4-mnn" >&2
MNN_PY=""
if [ "${MNN:-1}" = 1 ]; then
  MNN_PY="$("$ROOT/scripts/py" mnn --env)/bin/python"
fi
LOG="$OUT/runs-$ISA.jsonl"
: > "$LOG"
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for q in q4 q8; do
    echo "{\"engine\":\"pocket\",\"weights\":\"$q\",\"run\":$("$POCKET" bench "$OUT/$q.pocket" --pp "$P" -n "$N" --depth "$D" -t "$THREADS" --reps 1 --json)}" >> "$LOG"
    if [ "$q" = q4 ] && [ -n "$MNN_PY" ]; then
      echo "{\"engine\":\"mnn\",\"weights\":\"q4\",\"run\":$("$MNN_PY" "$ROOT/scripts/bench_mnn.py" "$OUT/q4-mnn" "$P" "$N" "$D" "$THREADS" 1 2>/dev/null | tail -1)}" >> "$LOG"
    fi
    for fa in 0 1; do
      echo "{\"engine\":\"llama.cpp\",\"weights\":\"${q}_0\",\"fa\":$fa,\"run\":$("$VENV/bin/python" "$ROOT/scripts/bench_llamacpp.py" "$OUT/${q}_0.gguf" "$P" "$N" "$D" "$THREADS" 1 "$fa")}" >> "$LOG"
    done
  done
done
python3 "$ROOT/scripts/bench_table.py" "$LOG"
