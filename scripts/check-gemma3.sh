#!/usr/bin/env bash
# Gemma 3 270M (fetched and converted by scripts/fetch-hf-models.sh gemma3) against transformers' recorded
# outputs in fixtures/gemma3-reference.json. With --refresh, re-records the reference with
# transformers first (needs the reference venv).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$("$ROOT/scripts/fetch-hf-models.sh" gemma3)"
if [ "${1:-}" = "--refresh" ]; then
  VENV="$("$ROOT/scripts/make-venv.sh")"
  "$VENV/bin/python" "$ROOT/scripts/gemma3_reference.py" "$MODEL" "$ROOT/src/calibration.txt" \
    "$ROOT/fixtures/gemma3-reference.json"
fi
cd "$ROOT"
POCKET_GEMMA3="$MODEL" cargo test --release --locked -p pocket-cli --test exact real_gemma3 -- --ignored --nocapture
