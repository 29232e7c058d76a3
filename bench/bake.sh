#!/usr/bin/env bash
# Benchmark: `kpackfs bake` of Debian's librocsparse.so.0.1 for one target,
# cold and warm page cache, wall time and peak RSS, against the reference
# tool's figures for the same job on this machine kind (237 s, 3.9 GB) and a
# `cp` of the same library measured in the same run.
# Usage: bash bench/bake.sh [TARGET]   (root: drops the page cache; env KPACKFS=binary)
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-gfx90a:xnack-}
LIB=/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1
[ -f "$LIB" ] || { [ "$(id -u)" -eq 0 ] && apt-get install -y -qq librocsparse0 >/dev/null; }
# KPACKFS=/path/to/kpackfs: measure that binary instead of building one
# (bench/run.sh passes its snapshot, so a rebuild mid-run cannot change it).
if [ -n "${KPACKFS:-}" ]; then
  K=$KPACKFS
else
  cargo build --release --locked -q -p kpackfs
  K=${CARGO_TARGET_DIR:-$PWD/target}/release/kpackfs
fi
W=$(mktemp -d /tmp/kpackfs-bench-bake.XXXXXX); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/src/lib"
ln "$LIB" "$W/src/lib/" 2>/dev/null || cp "$LIB" "$W/src/lib/"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
measure() { # label, command...
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$W/t" "$@" >/dev/null 2>&1
  read -r secs kb < "$W/t"
  printf '%-34s %8.2f s %10.1f MB\n' "$label" "$secs" "$(echo "$kb/1024" | bc -l)"
  echo "$secs $kb" > "$W/last"
}
echo "machine: $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB, $(uname -r)"
drop; measure "cp of the fat library (cold)" cp "$W/src/lib/librocsparse.so.0.1" "$W/copy"; rm -f "$W/copy"; read -r cpc _ < "$W/last"
measure "cp of the fat library (warm)" cp "$W/src/lib/librocsparse.so.0.1" "$W/copy"; rm -f "$W/copy"; read -r cpw _ < "$W/last"
drop; measure "kpackfs bake $TARGET (cold)" "$K" bake "$W/src" "$W/out1" --arch "$TARGET" --cache-dir none -q; read -r bc kbc < "$W/last"
measure "kpackfs bake $TARGET (warm)" "$K" bake "$W/src" "$W/out2" --arch "$TARGET" --cache-dir none -q; read -r bw kbw < "$W/last"
echo
printf 'speed-up vs reference (237 s):  %6.0fx cold, %6.0fx warm\n' "$(echo "237/$bc" | bc -l)" "$(echo "237/$bw" | bc -l)"
printf 'memory vs reference (3.9 GB):   %6.0fx less\n' "$(echo "3.9*1024*1024/$kbc" | bc -l)"
printf 'bake / cp of the same library:  %6.2f cold, %6.2f warm (below 1: faster than copying)\n' "$(echo "$bc/$cpc" | bc -l)" "$(echo "$bw/$cpw" | bc -l)"
