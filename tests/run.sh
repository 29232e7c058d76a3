#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian 12 machine: installs the
# packages the tests need (as root; CI is root), then `cargo test`.
#   fuse3          fusermount3 (non-root and auto-unmount mounts)
#   libzstd-dev    the zstd crate links Debian's libzstd (pkg-config)
#   clang-tools-15 clang-offload-bundler, the independent unbundling oracle
#   librocsparse0 librocrand1  real fat ROCm libraries for the acceptance test
#   gcc, binutils, util-linux, python3: test HIP runtime, readelf, setpriv/unshare
# No hipcc is needed: test assets are committed (test_assets/build.sh rebuilds them).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(fuse3 libzstd-dev pkg-config gcc libc6-dev binutils clang-tools-15 librocsparse0 librocrand1 python3 util-linux)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: please install (as root): apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "tests/run.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
exec cargo test --workspace --locked --no-fail-fast "$@"
