#!/usr/bin/env bash
# The main job: build kpackfs and mount the embedded demo install (a small
# fat ROCm-style prefix, test_assets/demo-install) as a slim per-GPU view,
# then show what changed. Usage: bash test_assets/demo.sh [MOUNTPOINT] [ARCH]
# With KPACKFS=kpackfs it runs an installed kpackfs from the PATH (the
# Debian package, `cargo install`) instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
MNT=${1:-/tmp/kpackfs-demo}
ARCH=${2:-gfx90a:xnack-}
if [ -n "${KPACKFS:-}" ]; then
  K=$(command -v "$KPACKFS") || { echo "test_assets/demo.sh: $KPACKFS is not on the PATH" >&2; exit 1; }
else
  bash .ci/apt-need.sh test_assets/demo.sh libzstd-dev pkg-config fuse3 gcc
  cargo build --release --locked -q -p kpackfs
  K=$PWD/target/release/kpackfs
fi
if mountpoint -q "$MNT" 2>/dev/null; then umount "$MNT"; fi
mkdir -p "$MNT"
# --demo: kpackfs serves its embedded copy of test_assets/demo-install.
"$K" mount --demo "$MNT" --arch "$ARCH"
sizes() { (cd "$1" && find . \( -type f -o -type l \) -printf '%10s  %p %l\n' | sort -k2); }
echo "== the fat demo install (test_assets/demo-install): targets it carries"
"$K" archs test_assets/demo-install
echo
echo "== fat install, $(find test_assets/demo-install -type f -printf '%s\n' | awk '{s+=$1} END {print s}') bytes"
sizes test_assets/demo-install
echo
echo "== slim view for $ARCH at $MNT, $(find "$MNT" -type f -printf '%s\n' | awk '{s+=$1} END {print s}') bytes"
sizes "$MNT"
echo
echo "== what the runtime loader finds for a gfx90a:sramecc+:xnack- GPU (no GPU needed)"
"$K" resolve "$MNT/lib/libdemo.so" --arch gfx90a:sramecc+:xnack- || true
echo
echo "Mounted at $MNT. Operator counters: getfattr -n user.kpackfs.stats $MNT (or python3 -c \"import os; print(os.getxattr('$MNT','user.kpackfs.stats').decode())\")"
echo "Unmount with: umount $MNT"
