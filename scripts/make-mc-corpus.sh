#!/usr/bin/env bash
# Remakes evals/tests/fixtures/mc_requests.jsonl (a sample with its documents) and
# data/mc_reference/*.jsonl (every item) from lm-eval 0.4.13's own task classes: the MMLU
# (5-shot), ARC-Challenge, HellaSwag, GPQA Diamond and BBH (bbh_cot_fewshot) requests for
# pocket's data files
# (scripts/fetch-eval-data.sh fetches them). Python: pyproject.toml's `lm-eval` extra (datasets,
# pyarrow, jinja2 and the modules lm_eval's task code imports; lm_eval itself without its model
# dependencies), via scripts/py.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${POCKET_DATA:-data}"
scripts/fetch-eval-data.sh >/dev/null
exec scripts/py lm-eval scripts/mc_reference.py "$DATA" "$DATA/mc_reference" \
  evals/tests/fixtures/mc_requests.jsonl
