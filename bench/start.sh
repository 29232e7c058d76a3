#!/usr/bin/env bash
# Process start as a user sees it (issue 23).
#
#   bash bench/start.sh [--smoke] [--reps N] [--raw FILE]
#
# One sample = one process, timed from fork to exit (bench/tools/bt.c
# `runs`): tests/hip-stub/dlopen_driver dlopen()s a real fat library
# (Debian's librocsparse.so.0.1, 1.3 GB; --smoke: librocrand.so.1.1) with
# the test HIP runtime (tests/hip-stub, standing in for libamdhip64.so.5)
# resolving every registered code object for one GPU: KPACK_STUB_ARCH =
# DEVICE (default gfx90a:sramecc+:xnack-, an MI200), KPACK_STUB_OUT = a
# fresh directory on /dev/shm that receives the selected code objects.
# The fat original goes through the HIPF path (bundles in .hip_fatbin); the
# view and the baked tree through the kpack loader (marker -> archive).
#
# Variants, each holding the library in lib/ as it would be installed:
#   fat           the original library on local disk
#   view          kpackfs mount SRC --arch ARCH (default gfx90a) with a
#                 cache directory that a previous mount of the same source
#                 filled (what a user with the default cache dir sees after
#                 the first use); the bench's own directory, not /var/cache
#   view-nocache  the same mount with --cache-dir none
#   baked         `kpackfs bake SRC OUT --arch ARCH` (baked once, up front)
# Cold: a freshly mounted daemon (view*), then sync; drop_caches right
# before the process (the daemon's plan is built by this first contact, as
# after a boot). Warm: further processes right after the cold one, same
# mount, page cache warm. Variants rotate which goes first in each
# repetition. Every process must resolve all its registrations (status OK)
# and the view's and the baked tree's code objects must equal the fat
# original's byte for byte (checked on each variant's first cold run).
# Ratios: each variant's median against the fat original's median in the
# same run, per cache state; target: view cold <= 1.2x fat cold.
#
# Needs root (mounts, drop_caches), fuse3, cc, libzstd-dev. KPACKFS=binary
# measures that binary instead of building one. --raw FILE appends the
# samples to FILE as `f10.<cold|warm>.<variant>.us` (bench/run.sh figure 10)
# plus f10.code_objects / f10.identical / f10.not_ok; otherwise a summary
# table is printed (nothing is written outside bench/work).
# Environment: START_ARCH (mount/bake --arch), START_DEVICE (stub ISA).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=full; REPS=""; RAWOUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) MODE=smoke ;;
    --reps) REPS=$2; shift ;;
    --raw) RAWOUT=$2; shift ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "usage: bash bench/start.sh [--smoke] [--reps N] [--raw FILE]" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "bench/start.sh: must run as root (mounts, drop_caches)" >&2; exit 2; }
if [ $MODE = full ]; then
  LIB=librocsparse.so.0.1; LINK=librocsparse.so.0; PKG=librocsparse0; R_COLD=${REPS:-5}; R_WARM=5
else
  LIB=librocrand.so.1.1; LINK=librocrand.so.1; PKG=librocrand1; R_COLD=${REPS:-1}; R_WARM=2
fi
bash "$ROOT/.ci/apt-need.sh" bench/start.sh fuse3 libzstd-dev "$PKG" >&2
ARCH=${START_ARCH:-gfx90a}
DEVICE=${START_DEVICE:-gfx90a:sramecc+:xnack-}
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
W=$ROOT/bench/work/start-$MODE
SRC=$W/src; BAKED=$W/baked; CD=$W/cachedir; MNT=$W/mnt; STUB=$W/stub
OUT=/dev/shm/kpackfs-start.$$
mkdir -p "$W/bin" "$MNT" "$STUB" "$SRC/lib"

if [ -n "${KPACKFS:-}" ]; then K=$KPACKFS; else
  (cd "$ROOT" && cargo build --release --locked -q -p kpackfs)
  K=$TGT/release/kpackfs
fi
cp "$K" "$W/bin/kpackfs"; K=$W/bin/kpackfs   # a rebuild during the run cannot change it
BT=$W/bin/bt
cc -O2 -Wall -o "$BT" "$ROOT/bench/tools/bt.c"
cc -O2 -shared -fPIC -DHAVE_ZSTD -o "$STUB/libamdhip64.so.5" "$ROOT/tests/hip-stub/hipstub.c" \
  -Wl,--version-script="$ROOT/tests/hip-stub/hipstub.map" -Wl,-soname,libamdhip64.so.5 -lzstd
cc -O2 -Wall -o "$STUB/dlopen_driver" "$ROOT/tests/hip-stub/dlopen_driver.c" -ldl

# --- source, baked tree, cache directory ----------------------------------------
SYS=/usr/lib/x86_64-linux-gnu/$LIB
[ "$SRC/lib/$LIB" -ef "$SYS" ] || ln -f "$SYS" "$SRC/lib/$LIB" 2>/dev/null || cp "$SYS" "$SRC/lib/$LIB"
ln -sfn "$LIB" "$SRC/lib/$LINK"
echo hello > "$SRC/hello.txt"
rm -rf "$BAKED"
"$K" bake "$SRC" "$BAKED" --arch "$ARCH" --cache-dir none -q

declare -A PID=()
stop() { # MNT
  local m=$1
  mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
  if [ -n "${PID[$m]:-}" ]; then wait "${PID[$m]}" 2>/dev/null || true; unset "PID[$m]"; fi
}
cleanup() { local rc=$?; set +e; for m in "${!PID[@]}"; do stop "$m"; done; rm -rf "$OUT"; exit $rc; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
start() { # VARIANT MNT
  local v=$1 m=$2 cd=none
  [ "$v" = view ] && cd=$CD
  mkdir -p "$m"
  "$K" mount -f "$SRC" "$m" --arch "$ARCH" --cache-dir "$cd" 2>>"$W/daemons.log" &
  PID[$m]=$!
  local i
  for i in $(seq 1000); do [ -e "$m/hello.txt" ] && return; kill -0 "${PID[$m]}" 2>/dev/null || break; sleep 0.01; done
  echo "bench/start.sh: $v did not come up at $m (see $W/daemons.log)" >&2; exit 1
}
lib_of() { # VARIANT -> the library path the process loads
  case $1 in
    fat) echo "$SRC/lib/$LIB" ;;
    baked) echo "$BAKED/lib/$LIB" ;;
    *) echo "$MNT/$1/lib/$LIB" ;;
  esac
}
run() { # VARIANT DIR -> microseconds of one process; DIR receives its code objects
  rm -rf "$2"; mkdir -p "$2"
  KPACK_STUB_OUT=$2 KPACK_STUB_ARCH=$DEVICE LD_LIBRARY_PATH=$STUB "$BT" runs 1 0 "$STUB/dlopen_driver" "$(lib_of "$1")"
}

# The cache directory as a previous mount of this source left it.
rm -rf "$CD"
start view "$MNT/view"; run view "$OUT/prime" > /dev/null; stop "$MNT/view"
# Read every input once so the VM host's own cache is equally warm for every
# variant (see bench/run.sh).
cat "$SRC/lib/$LIB" "$BAKED"/lib/* "$BAKED"/lib/.kpack/* > /dev/null

# --- samples ----------------------------------------------------------------------
RAW=$W/raw.tsv; : > "$RAW"
rec() { printf '%s\t%s\n' "$1" "$2" >> "$RAW"; }
VARIANTS=(fat view view-nocache baked)
NOT_OK=0
for r in $(seq "$R_COLD"); do
  k=$(( r % ${#VARIANTS[@]} ))
  for v in "${VARIANTS[@]:k}" "${VARIANTS[@]:0:k}"; do
    case $v in view*) start "$v" "$MNT/$v" ;; esac
    sync; echo 3 > /proc/sys/vm/drop_caches
    us=$(run "$v" "$OUT/$v"); rec "f10.cold.$v.us" "$us"
    NOT_OK=$(( NOT_OK + $(awk -F'\t' '$NF != "OK"' "$OUT/$v/log.tsv" | wc -l) ))
    [ "$r" = 1 ] && { rm -rf "$OUT/first.$v"; mv "$OUT/$v" "$OUT/first.$v"; }
    for i in $(seq "$R_WARM"); do
      rec "f10.warm.$v.us" "$(run "$v" "$OUT/$v")"
      NOT_OK=$(( NOT_OK + $(awk -F'\t' '$NF != "OK"' "$OUT/$v/log.tsv" | wc -l) ))
    done
    rm -rf "$OUT/$v"
    case $v in view*) stop "$MNT/$v" ;; esac
    echo "   start $v: cold ${us} us" >&2
  done
done
# The processes resolved the same code objects whatever they loaded.
N=$(wc -l < "$OUT/first.fat/log.tsv"); SAME=1
for v in view view-nocache baked; do
  [ "$(wc -l < "$OUT/first.$v/log.tsv")" = "$N" ] || SAME=0
  for c in "$OUT/first.fat"/*.co; do cmp -s "$c" "$OUT/first.$v/${c##*/}" || SAME=0; done
done
rec f10.code_objects "$(find "$OUT/first.fat" -name '*.co' | wc -l)"
rec f10.registrations "$N"
rec f10.identical "$SAME"
rec f10.not_ok "$NOT_OK"
rm -rf "$OUT"

if [ -n "$RAWOUT" ]; then cat "$RAW" >> "$RAWOUT"; else
  python3 - "$RAW" "$MODE" "$LIB" "$ARCH" "$DEVICE" <<'EOF'
import statistics, sys
raw, mode, lib, arch, device = sys.argv[1:]
s = {}
for l in open(raw):
    k, v = l.rstrip("\n").split("\t")
    s.setdefault(k, []).append(float(v))
med = lambda k: statistics.median(s[k]) if k in s else None
print(f"### Process start: dlopen of {lib} + code-object resolution for {device} ({mode}, mount/bake --arch {arch})\n")
print("| variant | cold | cold / fat | warm | warm / fat |\n|---|---|---|---|---|")
for v in ("fat", "view", "view-nocache", "baked"):
    c, w = med(f"f10.cold.{v}.us"), med(f"f10.warm.{v}.us")
    fc, fw = med("f10.cold.fat.us"), med("f10.warm.fat.us")
    print(f"| {v} | {c / 1000:.1f} ms | **{c / fc:.2f}** | {w / 1000:.1f} ms | **{w / fw:.2f}** |")
print(f"\n{med('f10.registrations'):.0f} registrations, {med('f10.code_objects'):.0f} code objects, "
      f"identical to the fat original's: {'yes' if med('f10.identical') == 1 else 'NO'}; "
      f"calls not OK: {med('f10.not_ok'):.0f}")
EOF
fi
[ "$(awk -F'\t' '$1 == "f10.identical" { print $2 }' "$RAW")" = 1 ] && [ "$NOT_OK" = 0 ] \
  || { echo "bench/start.sh: the variants did not resolve the same code objects (or a call failed)" >&2; exit 1; }
