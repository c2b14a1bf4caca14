#!/usr/bin/env bash
# `pocket serve` against the official `openai` Python client and Python's `jsonschema`, on
# SmolLM2 (the demo's model): chat, streaming, completions, greedy answers equal to `pocket run`,
# exact usage, JSON-schema answers validated, a tool call round trip, logprobs, errors
# (scripts/check_serve.py), then System One decisions against the official `typesafe-sdk`
# client (scripts/check_systemone.py). CI runs it; each check starts the server on a free loopback port
# and stops it with SIGTERM (exit status 0 required).
#   scripts/check-serve.sh [--model GGUF]
# Python: pyproject.toml's `serve` extra (openai, jsonschema, typesafe-sdk[zstd]), via scripts/py.
set -euo pipefail
cd "$(dirname "$0")/.."
POCKET="${POCKET:-target/release/pocket}"
[ -x "$POCKET" ] || cargo build --release --locked -p pocket-cli
scripts/py serve scripts/check_serve.py --pocket "$POCKET" "$@"
# POST /v1/systemone against the official TypeSafe SDK (default settings: bearer key, zstd).
exec scripts/py serve scripts/check_systemone.py --pocket "$POCKET" "$@"
