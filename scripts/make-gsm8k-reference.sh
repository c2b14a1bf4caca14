#!/usr/bin/env bash
# Builds the GSM8K Python reference (lm-evaluation-harness 0.4.13 itself, without its heavy
# dependencies) and regenerates the committed data and exactness fixtures of the Rust port:
#   evals/data/gsm8k/lm_eval_tasks.json               the four gsm8k yaml files as data
#   evals/tests/fixtures/gsm8k_completions.jsonl      synthetic responses (gsm8k_make_completions.py)
#   evals/tests/fixtures/gsm8k_reference_verdicts.jsonl   the harness's filters + exact match on them
#   evals/tests/fixtures/gsm8k_reference_prompts.jsonl    the harness's fewshot_context
# Never needed by CI or by `cargo test`. The venv lives outside the repository:
#   GSM8K_VENV (default: ../venv-eval next to the repository).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${GSM8K_VENV:-$(dirname "$ROOT")/venv-eval}"
FIX="$ROOT/evals/tests/fixtures"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# What the harness's task, filter and metric modules import; the rest (torch, datasets,
# sacrebleu, ...) is never reached by the reference and is stubbed in gsm8k_reference.py.
"$VENV/bin/pip" install -q "numpy==2.4.6" "PyYAML==6.0.4" "Jinja2==3.1.6" "MarkupSafe==3.0.4" \
  "dill==0.4.1" "tqdm==4.70.1" "typing_extensions==4.16.0"
"$VENV/bin/pip" install -q --no-deps "lm-eval==0.4.13"
TASKS="$("$VENV/bin/python" -c 'import os, lm_eval; print(os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "gsm8k"))' 2>/dev/null)"

"$VENV/bin/python" "$ROOT/scripts/gsm8k_lm_eval_data.py" "$TASKS" > "$ROOT/evals/data/gsm8k/lm_eval_tasks.json"
python3 "$ROOT/scripts/gsm8k_make_completions.py" > "$FIX/gsm8k_completions.jsonl"
"$VENV/bin/python" "$ROOT/scripts/gsm8k_reference.py" "$FIX/gsm8k_completions.jsonl" \
  "$FIX/gsm8k_reference_verdicts.jsonl" "$FIX/gsm8k_reference_prompts.jsonl"
