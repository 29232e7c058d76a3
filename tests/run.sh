#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian 12 machine: installs the
# packages the tests need (as root; CI is root), then `cargo test`.
#   fuse3          fusermount3 (non-root and auto-unmount mounts)
#   libzstd-dev    the zstd crate links Debian's libzstd (pkg-config)
#   clang-tools-15 clang-offload-bundler, the independent unbundling oracle
#   librocsparse0 librocrand1  real fat ROCm libraries for the acceptance test
#   gcc, binutils, util-linux, python3: test HIP runtime, readelf, setpriv/unshare
#   python3-pip    split-wheel: the host and device wheels are installed with pip
# No hipcc is needed: test assets are committed (test_assets/build.sh rebuilds them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/apt-need.sh tests/run.sh fuse3 libzstd-dev pkg-config gcc libc6-dev binutils clang-tools-15 librocsparse0 librocrand1 python3 python3-pip util-linux squashfs-tools
exec cargo test --workspace --locked --no-fail-fast "$@"
