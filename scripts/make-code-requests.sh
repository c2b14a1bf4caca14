#!/usr/bin/env bash
# Remakes evals/tests/fixtures/code_requests.jsonl (a sample with its problems, and
# mbpp_instruct's answer filter on fixed responses) and data/code_reference/*.jsonl (every item)
# from lm-eval 0.4.13's own humaneval, humaneval_instruct, mbpp and mbpp_instruct tasks, on
# pocket's data files (scripts/fetch-eval-data.sh). Uses the venv of scripts/make-mc-corpus.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${POCKET_DATA:-data}"
VENV="${POCKET_MC_VENV:-.venv-mc}"
if ! "$VENV/bin/python" -c "import lm_eval.api.task, datasets" 2>/dev/null; then
  echo "no lm-eval venv at $VENV: run scripts/make-mc-corpus.sh first (it makes it)" >&2
  exit 1
fi
scripts/fetch-eval-data.sh >/dev/null
exec "$VENV/bin/python" scripts/code_requests_reference.py "$DATA" "$DATA/code_reference" \
  evals/tests/fixtures/code_requests.jsonl
