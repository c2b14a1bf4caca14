# Sourced, not run: the aarch64 cross toolchain for this repository's scripts and CI.
# Debian's `rustc-web` 1.96 (its own rustc and cargo in /usr/bin) has an arm64 standard library
# (`libstd-rust-web-dev:arm64`); `gcc-aarch64-linux-gnu` links; `qemu-user` runs the result.
# With `--install` (or CI=true) the packages are installed when missing (root, apt).
# rustup's toolchain stays the default for x86 work: only the variables below point cargo at
# Debian's compiler, for the aarch64 target.

aarch64_packages="rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"

aarch64_missing() {
    local p missing=()
    for p in $aarch64_packages; do
        dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
    done
    echo "${missing[@]}"
}

aarch64_setup() {
    local missing
    missing="$(aarch64_missing)"
    if [ -n "$missing" ]; then
        if [ "${1:-}" != "--install" ] && [ "${CI:-}" != "true" ]; then
            echo "aarch64 cross-build needs Debian packages: $missing" >&2
            echo "install them with: scripts/build-aarch64.sh --install (root; apt)" >&2
            return 1
        fi
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo=sudo
        if ! dpkg --print-foreign-architectures | grep -qx arm64; then
            $sudo dpkg --add-architecture arm64
        fi
        $sudo apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing
    fi
    export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    # `-L /`: the host's multiarch arm64 libc. `-L /usr/aarch64-linux-gnu` mixes the cross
    # libc with the host's loader and hangs in pthread_create.
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /"
    # Debian's cargo for the cross build (rustup's cargo would work too, with RUSTC set).
    AARCH64_CARGO=/usr/bin/cargo
}
