#!/usr/bin/env bash
# Builds the GSM8K Python reference (lm-evaluation-harness 0.4.13 itself, without its heavy
# dependencies) and regenerates the committed data and exactness fixtures of the Rust port:
#   evals/data/gsm8k/lm_eval_tasks.json               the four gsm8k yaml files as data
#   evals/tests/fixtures/gsm8k_completions.jsonl      synthetic responses (gsm8k_make_completions.py)
#   evals/tests/fixtures/gsm8k_reference_verdicts.jsonl   the harness's filters + exact match on them
#   evals/tests/fixtures/gsm8k_reference_prompts.jsonl    the harness's fewshot_context
# Never needed by CI or by `cargo test`. Python: pyproject.toml's `lm-eval` extra (the harness
# without its heavy dependencies), via scripts/py.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$("$ROOT/scripts/py" lm-eval --env)"
FIX="$ROOT/evals/tests/fixtures"

TASKS="$("$VENV/bin/python" -c 'import os, lm_eval; print(os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "gsm8k"))' 2>/dev/null)"

"$VENV/bin/python" "$ROOT/scripts/gsm8k_lm_eval_data.py" "$TASKS" > "$ROOT/evals/data/gsm8k/lm_eval_tasks.json"
python3 "$ROOT/scripts/gsm8k_make_completions.py" > "$FIX/gsm8k_completions.jsonl"
"$VENV/bin/python" "$ROOT/scripts/gsm8k_reference.py" "$FIX/gsm8k_completions.jsonl" \
  "$FIX/gsm8k_reference_verdicts.jsonl" "$FIX/gsm8k_reference_prompts.jsonl"
