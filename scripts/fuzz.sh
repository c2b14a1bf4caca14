#!/usr/bin/env bash
# Runs the cargo-fuzz targets on stable Rust (libFuzzer, no sanitizer: `-s none`; the code under
# test has no `unsafe` outside kernels and mmap, and Rust's bounds checks turn overflows into
# panics, which libFuzzer reports as crashes).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   default: 600 s for every target, one after another
# Corpora grow in fuzz/corpus/TARGET (not committed); committed seeds are in fuzz/seeds/TARGET;
# crashes land in fuzz/artifacts/TARGET. Logs: fuzz/logs/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
SECS="${1:-600}"; shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(hf_checkpoint gguf_file pocket_file gguf_tokenizer chat_template structured decision lora_adapter eval_logs)
cargo fuzz build -s none -O
mkdir -p logs
# Scratch files (each input is written to disk, as users' files are) go to a tmpfs when there is one.
[ -d /dev/shm ] && export TMPDIR=/dev/shm
for t in "${TARGETS[@]}"; do
  mkdir -p "corpus/$t"
  echo "== $t: ${SECS}s"
  # chat_template: every hostile template that hits the 4 MiB memory budget leaves a parked
  # thread holding up to 4 MiB (src/alloc_guard.rs), hence more RSS headroom.
  rss=2048; [ "$t" = chat_template ] && rss=8192
  cargo fuzz run -s none -O "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$SECS" -timeout=10 -rss_limit_mb="$rss" -malloc_limit_mb=1024 \
    -max_len=131072 -print_final_stats=1 2>&1 | tee "logs/$t.log" | grep -E "^#[0-9]+ *(DONE|pulse)|stat::|ERROR|panicked|crash-|timeout|oom" || true
done
