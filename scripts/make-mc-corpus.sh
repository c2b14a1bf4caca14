#!/usr/bin/env bash
# Remakes evals/tests/fixtures/mc_requests.jsonl (a sample with its documents) and
# data/mc_reference/*.jsonl (every item) from lm-eval 0.4.13's own task classes: the MMLU
# (5-shot), ARC-Challenge, HellaSwag, GPQA Diamond and BBH (bbh_cot_fewshot) requests for
# pocket's data files
# (scripts/fetch-eval-data.sh fetches them). Makes .venv-mc (datasets, pyarrow, jinja2 and the
# modules lm_eval's task code imports; lm_eval itself without its model dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${POCKET_DATA:-data}"
VENV="${POCKET_MC_VENV:-.venv-mc}"
scripts/fetch-eval-data.sh >/dev/null
DL="$DATA/download"
python3 -m pip download --quiet --no-deps -d "$DL" "lm_eval==0.4.13"
if ! "$VENV/bin/python" -c "import lm_eval.api.task, lm_eval.tasks, datasets" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "datasets==5.2.0" "pyarrow==26.0.1" "Jinja2==3.1.6" "PyYAML==6.0.4" \
    "numpy==2.4.6" "requests==2.34.2" "sacrebleu==2.6.0"
  "$VENV/bin/pip" install -q --no-deps "$(ls "$DL"/lm_eval-0.4.13-*.whl)"
fi
exec "$VENV/bin/python" scripts/mc_reference.py "$DATA" "$DATA/mc_reference" \
  evals/tests/fixtures/mc_requests.jsonl
