#!/usr/bin/env bash
# Several views from one daemon vs one daemon per view (issue: operations).
#
#   bash bench/views.sh [--smoke]
#
# Source: Debian's librocsparse + librocrand (hard links in a work dir),
# three views (gfx90a:xnack-, gfx1030, gfx908:xnack-). For each layout —
# one daemon with --views, or three daemons with --arch — after dropping the
# page cache: the first full read of every file of every view (cat, summed
# over views), then the daemons' summed RSS (VmRSS) and peak RSS (VmHWM).
# Ratios are one daemon / three daemons in the same run. Also the soak
# figures of `tests/tests/soak.rs` when SOAK_LOG names its output.
# Needs root (mounts, drop_caches); installs its inputs with apt if missing.
# Full runs also write bench/RESULTS-views.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=full; [ "${1:-}" = --smoke ] && MODE=smoke
[ "$(id -u)" -eq 0 ] || { echo "bench/views.sh: must run as root" >&2; exit 2; }
bash "$ROOT/.ci/apt-need.sh" bench/views.sh librocsparse0 librocrand1 fuse3 >&2
W=$ROOT/bench/work/views-$MODE
rm -rf "$W"; mkdir -p "$W/src/lib" "$W/mnt"
LIBDIR=/usr/lib/x86_64-linux-gnu
LIBS="librocrand.so.1.1"; [ $MODE = full ] && LIBS="$LIBS librocsparse.so.0.1"
for l in $LIBS; do ln "$LIBDIR/$l" "$W/src/lib/$l" 2>/dev/null || cp "$LIBDIR/$l" "$W/src/lib/$l"; done
REPS=3; [ $MODE = smoke ] && REPS=1
# KPACKFS=/path/to/kpackfs measures that binary instead of building one.
if [ -n "${KPACKFS:-}" ]; then K=$KPACKFS; else
  (cd "$ROOT" && cargo build --release -q -p kpackfs)
  K=${CARGO_TARGET_DIR:-$ROOT/target}/release/kpackfs
fi
VIEWS=(gfx90a:xnack- gfx1030 gfx908:xnack-)
declare -a PIDS=()
cleanup() { for m in "$W"/mnt/*; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done; for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; true; }
trap cleanup EXIT
start() { # MNT ARGS...: a foreground daemon, its pid appended to PIDS
  local m=$1; shift; mkdir -p "$m"
  "$K" mount -f "$W/src" "$m" --cache-dir none "$@" 2>>"$W/daemon.log" & PIDS+=($!)
  for _ in $(seq 500); do mountpoint -q "$m" && return; sleep 0.01; done
  echo "mount at $m did not come up" >&2; exit 1
}
readall() { find "$1" -type f -print0 | xargs -0 cat > /dev/null; }
kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
now() { date +%s.%N; }
one_run() { # LAYOUT -> "read_s rss_kib hwm_kib"
  PIDS=(); rm -rf "$W/mnt"; mkdir -p "$W/mnt"
  if [ "$1" = one ]; then
    start "$W/mnt/all" --views "$(IFS=,; echo "${VIEWS[*]}")"
    dirs=(); for v in "${VIEWS[@]}"; do dirs+=("$W/mnt/all/$v"); done
  else
    dirs=(); i=0; for v in "${VIEWS[@]}"; do start "$W/mnt/v$i" --arch "$v"; dirs+=("$W/mnt/v$i"); i=$((i+1)); done
  fi
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1; t0=$(now); for d in "${dirs[@]}"; do readall "$d"; done; t1=$(now)
  local rss=0 hwm=0; for p in "${PIDS[@]}"; do rss=$((rss + $(kib "$p" VmRSS))); hwm=$((hwm + $(kib "$p" VmHWM))); done
  for m in "$W"/mnt/*; do umount "$m"; done; for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done; PIDS=()
  echo "$(echo "$t1 - $t0" | bc -l) $rss $hwm"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
declare -A R
for layout in one three; do
  for r in $(seq $REPS); do one_run $layout; done > "$W/$layout.txt"
  R[$layout.read]=$(cut -d' ' -f1 "$W/$layout.txt" | median)
  R[$layout.rss]=$(cut -d' ' -f2 "$W/$layout.txt" | median)
  R[$layout.hwm]=$(cut -d' ' -f3 "$W/$layout.txt" | median)
done
ratio() { echo "scale=2; $1 / $2" | bc -l; }
{
  echo "### Three views: one daemon (--views) vs three daemons ($MODE, median of $REPS, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "Source: $(echo $LIBS | sed 's/ /, /') (Debian); views ${VIEWS[*]}; --cache-dir none; page cache dropped before each run; kpackfs $("$K" --version | awk '{print $2}'), $(date -u '+%Y-%m-%d')."
  echo
  echo "| figure | one daemon | three daemons | one / three |"
  echo "|---|---|---|---|"
  echo "| first full read of every file of every view | ${R[one.read]} s | ${R[three.read]} s | $(ratio "${R[one.read]}" "${R[three.read]}") |"
  echo "| daemon RSS after the reads (sum) | ${R[one.rss]} KiB | ${R[three.rss]} KiB | $(ratio "${R[one.rss]}" "${R[three.rss]}") |"
  echo "| daemon peak RSS (VmHWM, sum) | ${R[one.hwm]} KiB | ${R[three.hwm]} KiB | $(ratio "${R[one.hwm]}" "${R[three.hwm]}") |"
  if [ -n "${SOAK_LOG:-}" ] && grep -q "^soak " "$SOAK_LOG"; then
    echo
    echo "### Soak (tests/tests/soak.rs)"
    echo
    grep -E "^soak |^RSS \(KiB\) over time" "$SOAK_LOG" | sed 's/^/    /'
  fi
} | tee "$W/RESULTS.md"
[ $MODE = full ] && cp "$W/RESULTS.md" "$ROOT/bench/RESULTS-views.md"
true
