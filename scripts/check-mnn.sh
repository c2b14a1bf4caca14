#!/usr/bin/env bash
# pocket's MNN export, loaded by MNN's own runtime (PyPI MNN==3.6.1) and compared with pocket on
# the same weights. Python: pyproject.toml's `mnn` extra (MNN==3.6.1), via scripts/py.
#
#   scripts/check-mnn.sh             SmolLM2-135M-Instruct (3 chat prompts) and the MNN-Pocket-
#                                    shape random checkpoint; fetches/builds them if missing
#   scripts/check-mnn.sh --fixtures  the tiny llama/qwen2/qwen3 fixtures; exit 1 unless MNN's
#                                    logits and greedy tokens equal pocket's (run by CI)
#
# MNN's wheel has a converter wrapper (MNN.tools) that pip-installs a logging SDK and sends
# telemetry when imported. Nothing here imports it, and a stub `aliyun.log` that refuses to
# import goes first on PYTHONPATH in case anything tries.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
STUB="$(mktemp -d)"
trap 'rm -rf "$STUB"' EXIT
mkdir -p "$STUB/aliyun/log"
echo 'raise ImportError("aliyun-log (MNN telemetry) is disabled by pocket")' > "$STUB/aliyun/log/__init__.py"
: > "$STUB/aliyun/__init__.py"
export PYTHONPATH="$STUB"

if [ -z "${POCKET:-}" ]; then
  cargo build --release --locked --quiet >&2
  POCKET="$ROOT/target/release/pocket"
fi
if [ "${1:-}" = "--fixtures" ]; then
  exec scripts/py mnn scripts/check_mnn.py --fixtures --pocket "$POCKET"
fi
SMOL="$(scripts/fetch-hf-models.sh smollm2)"
SHAPE="$ROOT/models/bench/q4.pocket"
if [ ! -f "$SHAPE" ]; then
  if [ ! -f "$ROOT/models/mnn-pocket-shape/config.json" ]; then
    scripts/py hf fixtures/make_fixtures.py --mnn-shape "$ROOT/models/mnn-pocket-shape" >&2
  fi
  mkdir -p "$(dirname "$SHAPE")"
  "$POCKET" export "$ROOT/models/mnn-pocket-shape" -o "$SHAPE" >&2
fi
exec scripts/py mnn scripts/check_mnn.py --pocket "$POCKET" --smollm2 "$SMOL" \
  --shape-pocket "$SHAPE" --work "$ROOT/models/mnn" "$@"
