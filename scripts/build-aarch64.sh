#!/usr/bin/env bash
# Builds the release `pocket` binary for aarch64 Linux (Raspberry Pi, Graviton, Android via
# Termux, ...) on an x86-64 Debian machine, and checks it starts under qemu.
#   scripts/build-aarch64.sh [--install]
# --install: install the Debian cross toolchain when it is missing (root; see aarch64-env.sh).
# The binary: target/aarch64-unknown-linux-gnu/release/pocket. It picks NEON, dotprod or
# i8mm kernels at run time (`pocket bench --json` reports which).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/aarch64-env.sh
. scripts/aarch64-env.sh
aarch64_setup "${1:-}"
"$AARCH64_CARGO" build --release --locked --target aarch64-unknown-linux-gnu -p pocket-cli
bin=target/aarch64-unknown-linux-gnu/release/pocket
file "$bin" 2> /dev/null || true
if command -v qemu-aarch64 > /dev/null; then
    QEMU_CPU=max qemu-aarch64 -L / "$bin" --version
fi
echo "$bin"
