#!/usr/bin/env bash
# `pocket serve` against the official `openai` Python client and Python's `jsonschema`, on
# SmolLM2 (the demo's model): chat, streaming, completions, greedy answers equal to `pocket run`,
# exact usage, JSON-schema answers validated, a tool call round trip, logprobs, errors
# (scripts/check_serve.py), then System One decisions against the official `typesafe-sdk`
# client (scripts/check_systemone.py). CI runs it; each check starts the server on a free loopback port
# and stops it with SIGTERM (exit status 0 required).
#   scripts/check-serve.sh [--model GGUF]
# Makes .venv-serve (openai, jsonschema, typesafe-sdk[zstd]; about 30 s) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${POCKET_SERVE_VENV:-.venv-serve}"
if ! "$VENV/bin/python" -c "import openai, jsonschema, typesafe_sdk, backports.zstd" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "openai==3.51.0" "jsonschema==4.26.0" "typesafe-sdk[zstd]==0.7.5"
fi
POCKET="${POCKET:-target/release/pocket}"
[ -x "$POCKET" ] || cargo build --release --locked -p pocket-cli
"$VENV/bin/python" scripts/check_serve.py --pocket "$POCKET" "$@"
# POST /v1/systemone against the official TypeSafe SDK (default settings: bearer key, zstd).
exec "$VENV/bin/python" scripts/check_systemone.py --pocket "$POCKET" "$@"
