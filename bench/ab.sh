#!/usr/bin/env bash
# A/B of cold sequential reads between kpackfs binaries (two builds of a
# change), with plainfs and the archive's own source ranges as the
# baselines of the same run: the quick check behind the read-ahead
# figures in bench/ANALYSIS.md. Needs the inputs bench/run.sh leaves in
# bench/work/full (run it once first) and root (drop_caches).
#
#   bash bench/ab.sh [--fresh] ROUNDS KPACKFS_BINARY...
#
# Default: one mount per binary kept up for the whole run; each round
# drops the page cache before every read of the transformed library (T)
# and of its archive (A) through each binary (T0, A0, T1, A1, …), then
# reads the library through plainfs (Tp) and the archive's source ranges
# directly with fadvise(WILLNEED) of the next range (Rw).
# --fresh: a fresh mount for every sample, as bench/run.sh figure 3 does;
# the transformed library only, through each binary and plainfs.
# Prints every sample, then the median of each series (MB/s).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FRESH=0; [ "${1:-}" = --fresh ] && { FRESH=1; shift; }
N=${1:?usage: ab.sh [--fresh] ROUNDS KPACKFS_BINARY...}; shift
[ $# -ge 1 ] || { echo "ab.sh: name at least one kpackfs binary" >&2; exit 2; }
BINS=("$@")
W=$ROOT/bench/work/full; S=$W/src; BT=$W/bin/bt
P=${CARGO_TARGET_DIR:-$ROOT/target}/bench-plainfs/release/plainfs
ARCH=gfx90a:xnack-; TN=lib/librocsparse.so.0.1; AN="lib/.kpack/librocsparse.so.0.1_$ARCH.kpack"
for f in "$S/$TN" "$BT" "$P"; do [ -e "$f" ] || { echo "ab.sh: $f missing: run bash bench/run.sh first" >&2; exit 2; }; done
M=$(mktemp -d); OUT=$M/samples
trap 'for m in "$M"/m*; do fusermount3 -u "$m" 2>/dev/null || true; done; wait; rm -rf "$M"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
up() { # polls (10 s at most) until the mount at $1 answers
  for _ in $(seq 500); do [ -e "$1/lib" ] && return 0; sleep 0.02; done
  echo "ab.sh: nothing mounted at $1" >&2; exit 1
}
kmount() { "$1" mount "$S" "$2" --arch "$ARCH" --cache-dir none --archive-compression none -f 2>/dev/null & up "$2"; }
mbps() { "$BT" read "$@" | sed 's/.*mbps=//'; }
mkdir -p "$M/mp"
TB=$(stat -c %s "$S/$TN")
if [ $FRESH = 0 ]; then
  "$P" "$S" "$M/mp" 2>/dev/null & up "$M/mp"
  for j in "${!BINS[@]}"; do mkdir -p "$M/m$j"; kmount "${BINS[$j]}" "$M/m$j"; done
  TB=$(stat -c %s "$M/m0/$TN")
  python3 "$ROOT/bench/tools/archive_ranges.py" "${BINS[0]}" "$S/$TN" "$ARCH" > "$M/ranges"
fi
for i in $(seq "$N"); do
  for j in "${!BINS[@]}"; do
    if [ $FRESH = 1 ]; then
      mkdir -p "$M/m$j"; kmount "${BINS[$j]}" "$M/m$j"
      stat "$M/m$j/$TN" > /dev/null; drop; echo "T$j $(mbps "$M/m$j/$TN")"
      fusermount3 -u "$M/m$j"; wait
      continue
    fi
    stat "$M/m$j/$TN" "$M/m$j/$AN" > /dev/null; drop; echo "T$j $(mbps "$M/m$j/$TN")"
    drop; echo "A$j $(mbps "$M/m$j/$AN")"
  done
  if [ $FRESH = 1 ]; then "$P" "$S" "$M/mp" 2>/dev/null & up "$M/mp"; fi
  stat "$M/mp/$TN" > /dev/null; drop; echo "Tp $(mbps "$M/mp/$TN" "$TB")"
  if [ $FRESH = 1 ]; then fusermount3 -u "$M/mp"; wait; else drop; echo "Rw $("$BT" read-ranges "$S/$TN" "$M/ranges" 1 | sed 's/.*mbps=//')"; fi
done | tee "$OUT"
python3 - "$OUT" <<'EOF'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    k, v = line.split()
    d[k].append(float(v))
for k in sorted(d):
    print(f"median {k}: {statistics.median(d[k]):.0f} MB/s over {len(d[k])}")
EOF
