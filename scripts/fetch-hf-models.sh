#!/usr/bin/env bash
# HF checkpoints made from the fetched GGUFs with transformers, for the reference checks that
# compare pocket with transformers (check-real-model.sh, check-mnn.sh, check-gguf-llamacpp.sh,
# the IFEval fixture). Needs the torch venv (scripts/make-venv.sh, ~5.6 GB, made on first use);
# the demo and the tests never do.
#   smollm2  models/smollm2-135m-instruct (bf16 safetensors, tokenizer.json, chat template)
#   gemma3   models/gemma3-270m
# Usage: scripts/fetch-hf-models.sh [NAME]   (default: smollm2). Prints the checkpoint directory.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODELS="${POCKET_MODELS:-$ROOT/models}"
NAME="${1:-smollm2}"
case "$NAME" in
  smollm2) OUT="$MODELS/smollm2-135m-instruct" ;;
  gemma3) OUT="$MODELS/gemma3-270m" ;;
  *) echo "fetch-hf-models.sh: unknown model \`$NAME\` (smollm2 or gemma3)" >&2; exit 2 ;;
esac
if [ -f "$OUT/model.safetensors" ] && [ -f "$OUT/tokenizer.json" ]; then
  echo "$OUT"
  exit 0
fi
GGUF="$("$ROOT/scripts/fetch-models.sh" "$NAME")"
VENV="$("$ROOT/scripts/make-venv.sh")"
echo "converting $GGUF to an HF checkpoint with transformers" >&2
"$VENV/bin/python" "$ROOT/scripts/gguf_to_hf.py" "$GGUF" "$OUT.tmp" >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
