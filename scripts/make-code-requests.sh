#!/usr/bin/env bash
# Remakes evals/tests/fixtures/code_requests.jsonl (a sample with its problems, and
# mbpp_instruct's answer filter on fixed responses) and data/code_reference/*.jsonl (every item)
# from lm-eval 0.4.13's own humaneval, humaneval_instruct, mbpp and mbpp_instruct tasks, on
# pocket's data files (scripts/fetch-eval-data.sh). Python: pyproject.toml's `lm-eval` extra.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${POCKET_DATA:-data}"
scripts/fetch-eval-data.sh >/dev/null
exec scripts/py lm-eval scripts/code_requests_reference.py "$DATA" "$DATA/code_reference" \
  evals/tests/fixtures/code_requests.jsonl
