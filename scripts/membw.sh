#!/usr/bin/env bash
# Measures read bandwidth at sizes from L2 to DRAM with 1 and 2 threads (docs/performance.md,
# issue #9): the ceiling for decode, which reads every weight byte once per token.
# Usage: scripts/membw.sh            (needs gcc with OpenMP; builds into a temp dir)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
gcc -O2 -march=native -fopenmp "$ROOT/scripts/membw.c" -o "$TMP/membw"
for t in 1 2; do
  for bytes in 512000 8000000 24000000 171500000 1000000000; do
    OMP_NUM_THREADS=$t "$TMP/membw" "$bytes" 15
  done
done
