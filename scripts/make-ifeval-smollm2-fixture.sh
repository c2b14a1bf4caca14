#!/usr/bin/env bash
# Real model responses for the IFEval exactness corpus (issue #6): SmolLM2-135M-Instruct's
# default Q4 build answers all 541 prompts through pocket (greedy, chat template, 1280 tokens),
# and the pinned Python reference records its verdicts on them:
#   evals/tests/fixtures/ifeval_smollm2_responses.jsonl          {"key", "response"}, input order
#   evals/tests/fixtures/ifeval_smollm2_reference_verdicts.jsonl the reference's verdicts
# Needs the model (scripts/fetch-hf-models.sh) and the reference that
# scripts/make-ifeval-fixtures.sh sets up in the `lm-eval` environment (scripts/py). Never run
# by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$("$ROOT/scripts/py" lm-eval --env)"
FIX="$ROOT/evals/tests/fixtures"
WORK="${WORK:-$ROOT/eval-runs}"
cd "$ROOT"
cargo build --release --locked --quiet
SRC="$(scripts/fetch-hf-models.sh smollm2)"
Q4="$ROOT/models/smollm2-q4.pocket"
[ -f "$Q4" ] || target/release/pocket export "$SRC" -o "$Q4" >&2
DATA="$(bash scripts/fetch-eval-data.sh | tail -1)"
mkdir -p "$WORK"
LOG="$WORK/smollm2-q4-ifeval.jsonl"
# Resumes from LOG if an earlier run was interrupted.
target/release/pocket eval ifeval "$Q4" --data "$DATA/ifeval/input_data.jsonl" --out "$LOG" --json >/dev/null
python3 - "$DATA/ifeval/input_data.jsonl" "$LOG" "$FIX/ifeval_smollm2_responses.jsonl" <<'PY'
import json, sys
order = [json.loads(l)["key"] for l in open(sys.argv[1], encoding="utf-8")]
got = {}
for line in open(sys.argv[2], encoding="utf-8"):
    row = json.loads(line)
    got[row["key"]] = row["response"]
assert sorted(got) == sorted(order), "the run did not answer every prompt"
with open(sys.argv[3], "w", encoding="utf-8") as f:
    for k in order:
        f.write(json.dumps({"key": k, "response": got[k]}, ensure_ascii=False) + "\n")
PY
export LM_EVAL_ROOT="$VENV/ifeval_ref" NLTK_DATA="$VENV/nltk_data"
"$VENV/bin/python" scripts/ifeval_reference.py verdicts "$FIX/ifeval_input_data.jsonl" \
  "$FIX/ifeval_smollm2_responses.jsonl" "$FIX/ifeval_smollm2_reference_verdicts.jsonl" 2>/dev/null
wc -l "$FIX"/ifeval_smollm2_*.jsonl
