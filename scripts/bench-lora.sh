#!/usr/bin/env bash
# What an unmerged LoRA adapter costs on the MNN-Pocket shape (docs/lora.md, "Speed"): the
# random checkpoint (fixtures/make_fixtures.py --mnn-shape), its Q4 .pocket, two random r-16
# PEFT adapters on all seven linear layers, and the Q4 export with adapter a merged; then
# scripts/bench_lora.py (bench alternating base / unmerged / merged, and serve with no, one and
# two adapters in the batch). Needs the torch venv (scripts/make-venv.sh) to make the files.
# Do not run it while anything else uses the CPU. Prints bench_lora.py's JSON.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
cargo build --release --locked --quiet
POCKET="$ROOT/target/release/pocket"
SRC="$ROOT/models/mnn-pocket-shape"
OUT="$ROOT/models/bench"
mkdir -p "$OUT"
PY=""
venv() { [ -n "$PY" ] || PY="$("$ROOT/scripts/make-venv.sh")/bin/python"; }
if [ ! -f "$SRC/config.json" ]; then venv; "$PY" fixtures/make_fixtures.py --mnn-shape "$SRC" >&2; fi
for ab in a:1 b:2; do
  d="$OUT/lora-r16-${ab%%:*}"
  [ -f "$d/adapter_model.safetensors" ] || { venv; "$PY" fixtures/make_lora_fixtures.py --random "$SRC" "$d" 16 "${ab##*:}" >&2; }
done
[ -f "$OUT/q4.pocket" ] || "$POCKET" export "$SRC" -o "$OUT/q4.pocket" >&2
[ -f "$OUT/q4-lora-a.pocket" ] || "$POCKET" export "$SRC" --lora "$OUT/lora-r16-a" -o "$OUT/q4-lora-a.pocket" >&2
exec python3 scripts/bench_lora.py "$POCKET" "$OUT/q4.pocket" "$OUT/lora-r16-a" "$OUT/lora-r16-b" \
  "$OUT/q4-lora-a.pocket" "$@"
