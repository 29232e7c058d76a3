#!/usr/bin/env bash
# The empty-selection check on a compressed install (issue 21 item 5).
#
#   bash bench/selection_check.sh
#
# Source: Debian's librocsparse recompressed in place to CCOB v3 (zstd,
# `kpackfs recompress`): 111 bundles, 1.2 GiB -> 169 MiB, the rest of the
# 1.3 GB section zero padding. Selection gfx1100, which it does not carry.
# Prints, warm (page cache filled by a first run) and after one drop of the
# page cache:
#   check  - `bake`'s warning line timestamp minus the command's start
#            (the check runs first, before any baking), ms;
#   mount  - whether a detached `kpackfs mount` printed the warning on its
#            own stderr (yes) or left it to the daemon's log (no), and how
#            long the mount command took, ms.
# Needs root (mount, drop_caches). KPACKFS=/path/to/kpackfs measures that
# binary instead of building one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "bench/selection_check.sh: must run as root" >&2; exit 2; }
bash "$ROOT/.ci/apt-need.sh" bench/selection_check.sh librocsparse0 fuse3 >&2
if [ -n "${KPACKFS:-}" ]; then K=$KPACKFS; else
  (cd "$ROOT" && cargo build --release -q -p kpackfs)
  K=${CARGO_TARGET_DIR:-$ROOT/target}/release/kpackfs
fi
W=$ROOT/bench/work/selection
mkdir -p "$W/src/lib" "$W/mnt"
LIB=$W/src/lib/librocsparse.so.0.1
[ -f "$LIB" ] || "$K" recompress /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1 "$LIB" --ccob-version 3 >&2

now_ms() { date +%s%3N; }

check() {
  rm -rf "$W/out"
  local t0 line
  t0=$(now_ms)
  line=$("$K" bake "$W/src" "$W/out" --arch gfx1100 --cache-dir none -q 2>&1 | grep -m1 'matches no code object' || true)
  [ -n "$line" ] || { echo "no warning from bake" >&2; exit 1; }
  # [2026-11-25T11:38:59.625Z WARN ...]
  local ts=${line:1:24}
  echo $(( $(date -d "$ts" +%s%3N) - t0 ))
}

mount_once() {
  local t0 t1 err
  t0=$(now_ms)
  err=$(env -u RUST_LOG "$K" mount "$W/src" "$W/mnt" --arch gfx1100 --cache-dir none 2>&1 </dev/null)
  t1=$(now_ms)
  umount "$W/mnt"
  if grep -q 'matches no code object' <<<"$err"; then echo "yes $((t1 - t0))"; else echo "no $((t1 - t0))"; fi
}

check >/dev/null
for i in 1 2 3; do echo "warm  check ${i}: $(check) ms"; done
echo "warm  mount: warning on stderr, ms: $(mount_once)"
sync; echo 3 >/proc/sys/vm/drop_caches
echo "cold  check: $(check) ms"
sync; echo 3 >/proc/sys/vm/drop_caches
echo "cold  mount: warning on stderr, ms: $(mount_once)"
rm -rf "$W/out"
