#!/usr/bin/env bash
# The real-model checks of issue #2: SmolLM2-135M-Instruct (converted by
# scripts/fetch-hf-models.sh) against transformers' recorded outputs in
# fixtures/smollm2-reference.json. With --refresh, re-records the reference with transformers
# first (needs the reference venv).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$("$ROOT/scripts/fetch-hf-models.sh" smollm2)"
if [ "${1:-}" = "--refresh" ]; then
  VENV="$("$ROOT/scripts/make-venv.sh")"
  "$VENV/bin/python" "$ROOT/scripts/hf_reference.py" "$MODEL" "$ROOT/fixtures/smollm2-reference.json"
fi
cd "$ROOT"
POCKET_REAL_MODEL="$MODEL" cargo test --release --locked -p pocket-cli --test engine real_model -- --ignored --nocapture
