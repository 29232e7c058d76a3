#!/usr/bin/env bash
# The packager's commands (issue: packagers): split and split-wheel of
# Debian's librocsparse against copying the same input, in the same run.
#
#   bash bench/split.sh [--smoke]
#
# Inputs (hard links in a work dir): librocsparse.so.0.1 (1.3 GB of device
# code, 111 bundles, 7 targets) + librocrand.so.1.1; smoke: librocrand only.
# Page cache warm (every input read once first): the figures are the
# tools' own cost, not the disk's. For each tool, median of REPS runs of
# wall time and peak RSS (GNU time %e %M):
#   * cp -r of the input (the floor for "rewrite an install");
#   * kpackfs split, all targets, --archive-compression zstd (upstream's
#     default) and none; and of the same libraries recompressed to CCOB v3
#     (ROCm 6.2+'s compressed bundles);
#   * kpackfs verify --against the input (every wrapper, every target,
#     both loaders, byte-exact);
#   * kpackfs split-wheel of a wheel holding the same libraries, against
#     python3 zipfile unpacking the same wheel (the floor for any tool
#     that must read it).
# The reference tool's figures (upstream Python splitter, one library on
# this machine: 237 s, 3.9 GB peak) were measured once in an earlier
# session and are quoted, not re-run (it is not part of this repository).
# Full runs write bench/RESULTS-split.md, which bench/report.py includes.
# KPACKFS=/path/to/kpackfs measures that binary instead of building one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=full; [ "${1:-}" = --smoke ] && MODE=smoke
bash "$ROOT/.ci/apt-need.sh" bench/split.sh librocsparse0 librocrand1 time python3 >&2
W=$ROOT/bench/work/split-$MODE
rm -rf "$W"; mkdir -p "$W/src/lib"
LIBDIR=/usr/lib/x86_64-linux-gnu
LIBS="librocrand.so.1.1"; [ $MODE = full ] && LIBS="librocsparse.so.0.1 $LIBS"
for l in $LIBS; do ln "$LIBDIR/$l" "$W/src/lib/$l" 2>/dev/null || cp "$LIBDIR/$l" "$W/src/lib/$l"; done
REPS=3; [ $MODE = smoke ] && REPS=1
if [ -n "${KPACKFS:-}" ]; then K=$KPACKFS; else
  (cd "$ROOT" && cargo build --release -q -p kpackfs)
  K=${CARGO_TARGET_DIR:-$ROOT/target}/release/kpackfs
fi
cat "$W"/src/lib/* > /dev/null   # warm the page cache
IN_BYTES=$(du -sbL "$W/src" | cut -f1)

# run NAME CMD...: one timed run, "secs kib" appended to $W/NAME.txt; the
# output directory $W/out is emptied before and after.
run() {
  local name=$1; shift
  rm -rf "$W/out"
  /usr/bin/time -f "%e %M" -o "$W/time.txt" "$@" > "$W/$name.log" 2>&1 || { cat "$W/$name.log" >&2; exit 1; }
  cat "$W/time.txt" >> "$W/$name.txt"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
col() { cut -d' ' -f"$2" "$W/$1.txt" | median; }
ratio() { echo "scale=3; $1 / $2" | bc -l | sed 's/^\./0./'; }

for r in $(seq $REPS); do
  run cp cp -r "$W/src" "$W/out"
  run split_zstd "$K" split "$W/src" "$W/out" -c rocm -q
  run split_none "$K" split "$W/src" "$W/out" -c rocm -q --archive-compression none
done
rm -rf "$W/split"; "$K" split "$W/src" "$W/split" -c rocm -q
OUT_BYTES=$(du -sb "$W/split" | cut -f1)
for r in $(seq $REPS); do
  /usr/bin/time -f "%e %M" -o "$W/time.txt" "$K" verify "$W/split" --against "$W/src" > "$W/verify.log" 2>&1 || { cat "$W/verify.log" >&2; exit 1; }
  cat "$W/time.txt" >> "$W/verify.txt"
done

# The same libraries with CCOB v3 (zstd) bundles, as ROCm 6.2+ ships them:
# every bundle is decoded once for all targets.
mkdir -p "$W/ccob/lib"
for l in $LIBS; do "$K" recompress "$W/src/lib/$l" "$W/ccob/lib/$l" 2>/dev/null; done
for r in $(seq $REPS); do
  run split_ccob "$K" split "$W/ccob" "$W/out" -c rocm -q
done

# A wheel holding the libraries (stored deflated, as wheels are).
HAVE_WHEEL=0
if "$K" split-wheel --help > /dev/null 2>&1; then
  HAVE_WHEEL=1
  python3 - "$W/src/lib" "$W/rocmlibs-1.0-py3-none-linux_x86_64.whl" <<'EOF'
import base64, hashlib, os, sys, zipfile
src, whl = sys.argv[1], sys.argv[2]
record = []
with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
    def add(name, data, mode=0o644):
        zi = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)); zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, data, compresslevel=1)
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={h},{len(data)}")
    add("rocmlibs/__init__.py", b"")
    for f in sorted(os.listdir(src)):
        add(f"rocmlibs/lib/{f}", open(os.path.join(src, f), "rb").read(), 0o755)
    di = "rocmlibs-1.0.dist-info"
    add(f"{di}/METADATA", b"Metadata-Version: 2.1\nName: rocmlibs\nVersion: 1.0\n")
    add(f"{di}/WHEEL", b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")
    record.append(f"{di}/RECORD,,")
    z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
EOF
  WHEEL_BYTES=$(stat -c %s "$W/rocmlibs-1.0-py3-none-linux_x86_64.whl")
  for r in $(seq $REPS); do
    run unzip python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$W/rocmlibs-1.0-py3-none-linux_x86_64.whl" "$W/out"
    run split_wheel "$K" split-wheel "$W/rocmlibs-1.0-py3-none-linux_x86_64.whl" "$W/out" -q
  done
fi
rm -rf "$W/out"

ref_s=237; ref_kib=$((3900 * 1024))
{
  echo "### Packagers: split, verify, split-wheel ($MODE, median of $REPS, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "Input: $(echo $LIBS | sed 's/ /, /') (Debian), $((IN_BYTES / 1048576)) MiB, page cache warm; all targets; $(nproc) cores; kpackfs $("$K" --version | awk '{print $2}'), $(date -u '+%Y-%m-%d'). Split output (zstd): $((OUT_BYTES / 1048576)) MiB allocated."
  echo
  echo "| tool | wall | peak RSS | wall / cp | RSS / cp |"
  echo "|---|---|---|---|---|"
  for n in cp split_zstd split_none; do
    echo "| $n | $(col $n 1) s | $(col $n 2) KiB | $(ratio "$(col $n 1)" "$(col cp 1)") | $(ratio "$(col $n 2)" "$(col cp 2)") |"
  done
  echo "| split_ccob (same libraries, CCOB v3 bundles: decode + zstd) | $(col split_ccob 1) s | $(col split_ccob 2) KiB | $(ratio "$(col split_ccob 1)" "$(col cp 1)") | $(ratio "$(col split_ccob 2)" "$(col cp 2)") |"
  echo "| verify --against (every wrapper × target × 2 loaders) | $(col verify 1) s | $(col verify 2) KiB | $(ratio "$(col verify 1)" "$(col cp 1)") | $(ratio "$(col verify 2)" "$(col cp 2)") |"
  if [ $MODE = full ]; then
    echo
    echo "Against the reference splitter's figures for librocsparse alone (237 s, 3.9 GB peak; quoted, earlier measurement on this machine): split (zstd) takes $(ratio "$(col split_zstd 1)" $ref_s)x the time and $(ratio "$(col split_zstd 2)" $ref_kib)x the memory, for both libraries."
  fi
  if [ $HAVE_WHEEL = 1 ]; then
    echo
    echo "Wheel: $((WHEEL_BYTES / 1048576)) MiB (deflate level 1)."
    echo
    echo "| tool | wall | peak RSS | wall / unzip |"
    echo "|---|---|---|---|"
    echo "| python3 zipfile extractall | $(col unzip 1) s | $(col unzip 2) KiB | 1.000 |"
    echo "| kpackfs split-wheel | $(col split_wheel 1) s | $(col split_wheel 2) KiB | $(ratio "$(col split_wheel 1)" "$(col unzip 1)") |"
  fi
} | tee "$W/RESULTS.md"
[ $MODE = full ] && cp "$W/RESULTS.md" "$ROOT/bench/RESULTS-split.md"
true
