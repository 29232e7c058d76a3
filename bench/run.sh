#!/usr/bin/env bash
# kpackfs benchmark suite.
#
#   bash bench/run.sh            full run (~8-10 min on 2 cores): Debian's librocsparse
#                                (1.3 GB) and librocrand, a 1 GiB data file, a
#                                33,000-file install-shaped tree; writes bench/RESULTS.md
#   bash bench/run.sh --smoke    CI check that the suite works (< 1 min once
#                                built): librocrand only, tiny inputs, one
#                                repetition, no figure asserted; writes
#                                bench/work/smoke/RESULTS.md
#
# Every figure is a ratio against a baseline measured in the same run: the
# source file read directly, and/or the same file through `plainfs`
# (bench/plainfs: the simplest fuser 0.18 read-only passthrough mount: TTL
# 1 s, no FOPEN_KEEP_CACHE, no kernel passthrough, 4 workers).
# Figures 10 (process start: dlopen + code-object resolution through the view,
# a baked tree and the fat original) and 11 (walks of an install-shaped tree)
# are bench/start.sh and bench/tree.sh, whose headers describe every row;
# their samples join this run's (--raw) and report.py judges them.
# Needs root (mounts, /proc/sys/vm/drop_caches). Inputs are installed with
# apt-get if missing. All mounts are removed on exit, also on failure.
#
# Environment: BENCH_ARCH (default gfx90a:xnack-), BENCH_BUSY_WAIT (seconds
# to wait for a background fuzz/test run to end before measuring; default
# 1500 full, 0 smoke), BENCH_DATA_MB (size of the plain data file).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=full
for a in "$@"; do
  case $a in
    --smoke) MODE=smoke ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "usage: bash bench/run.sh [--smoke]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench/run.sh: must run as root (mounts, drop_caches)" >&2; exit 2; }

T_START=$(date +%s.%N)
LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
ARCH=${BENCH_ARCH:-gfx90a:xnack-}
SYSLIB=/usr/lib/x86_64-linux-gnu
W=$ROOT/bench/work/$MODE          # bench/work is git-ignored
RAW=$W/raw.tsv
if [ $MODE = full ]; then
  LIB=librocsparse.so.0.1; LIBLINK=librocsparse.so.0
  LIBS="librocsparse.so.0.1:librocsparse.so.0 librocrand.so.1.1:librocrand.so.1"
  PKGS="librocsparse0 librocrand1 fio zstd"
  DATA_MB=${BENCH_DATA_MB:-1024}
  R_MOUNT=10; R_FIRST=6; R_COLD=6; R_WARM=7; FIO_SECS=5; FIO_RAMP=1; R_FIO=3; R_DL=20; W_DL=3; R_CCOB=3
  BUSY_WAIT=${BENCH_BUSY_WAIT:-1500}
  RESULTS=$ROOT/bench/RESULTS.md
else
  LIB=librocrand.so.1.1; LIBLINK=librocrand.so.1
  LIBS="librocrand.so.1.1:librocrand.so.1"
  PKGS="librocrand1 fio zstd"
  DATA_MB=${BENCH_DATA_MB:-16}
  R_MOUNT=3; R_FIRST=1; R_COLD=1; R_WARM=2; FIO_SECS=1; FIO_RAMP=0; R_FIO=1; R_DL=3; W_DL=1; R_CCOB=1
  BUSY_WAIT=${BENCH_BUSY_WAIT:-0}
  RESULTS=$W/RESULTS.md
fi
ARCHIVE_NAME=${LIB}_${ARCH}.kpack
K=$W/bin/kpackfs       # a snapshot of the release build: a rebuild during the run cannot change it
P=${CARGO_TARGET_DIR:-$ROOT/target}/bench-plainfs/release/plainfs
BT=$W/bin/bt
STUB=$W/stub
SRC=$W/src
CCOB=$W/ccob
MNT=$W/mnt
CMDS=$W/commands.txt

say() { printf '\n== %s\n' "$*" >&2; }
log() { printf '   %s\n' "$*" >&2; }
rec() { printf '%s\t%s\n' "$1" "$2" >> "$RAW"; }    # key value (one sample)
cmd() { printf '%s\n' "$*" >> "$CMDS"; }            # an exact command used, for RESULTS.md
now() { date +%s.%N; }

# --- mounts: every one is recorded and removed on exit ----------------------
declare -A BTPID=() DPID=()
is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }
unmount() { # MNT: unmount (lazily if busy) and wait for the daemon to exit
  local m=$1 i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    is_mounted "$m" || break
    umount "$m" 2>/dev/null && break
    sleep 0.2
  done
  if is_mounted "$m"; then umount -l "$m" 2>/dev/null || true; fi
  local bp=${BTPID[$m]:-}
  if [ -n "$bp" ]; then
    for i in $(seq 200); do kill -0 "$bp" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$bp" 2>/dev/null; then
      [ -n "${DPID[$m]:-}" ] && kill -TERM "${DPID[$m]}" 2>/dev/null || true
      sleep 0.5; kill -TERM "$bp" 2>/dev/null || true
    fi
    wait "$bp" 2>/dev/null || true
    unset "BTPID[$m]" "DPID[$m]"
  fi
}
cleanup() {
  local rc=$?
  set +e
  for m in "${!BTPID[@]}"; do unmount "$m"; done
  if [ -d "$MNT" ]; then for m in "$MNT"/*; do is_mounted "$m" && unmount "$m"; done; fi
  rm -rf /dev/shm/kpackfs-bench.$$
  [ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
  [ $rc -ne 0 ] && echo "bench/run.sh: FAILED (exit $rc); mounts removed" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# mount_start KIND MNT [args]: KIND k = kpackfs -f (foreground daemon, pid
# known), kd = kpackfs detached (default mode), p = plainfs. The source is
# $MSRC (default $SRC). Waits until $MNT/hello.txt can be stat()ed; sets
# USABLE_US (command start -> first successful stat) and the daemon pid.
mount_start() {
  local kind=$1 m=$2; shift 2
  local src=${MSRC:-$SRC} out=$W/tmp/mount.$(basename "$m").out
  mkdir -p "$m"
  is_mounted "$m" && unmount "$m"
  local -a c
  # Figures 1-8 measure the daemon itself: no persistent cache directory (a
  # warm one would answer from disk) and archives stored as `none`, unless the
  # caller asks otherwise (figure 3's --materialize, figure 9).
  local -a d=()
  case " $* " in *" --cache-dir "*) ;; *) d+=(--cache-dir none) ;; esac
  case " $* " in *" --archive-compression "*) ;; *) d+=(--archive-compression none) ;; esac
  case $kind in
    k) c=("$K" mount "$src" "$m" --arch "$ARCH" -f "${d[@]}" "$@") ;;
    kd) c=("$K" mount "$src" "$m" --arch "$ARCH" "${d[@]}" "$@") ;;
    p) c=("$P" "$src" "$m" "$@") ;;
  esac
  : > "$out"
  BT_LOG=$W/tmp/daemons.log "$BT" mount-wait "$m/hello.txt" 20000 -- "${c[@]}" > "$out" &
  BTPID[$m]=$!
  local i
  for i in $(seq 2000); do
    grep -q '^usable_us=' "$out" && break
    kill -0 "${BTPID[$m]}" 2>/dev/null || break
    sleep 0.01
  done
  USABLE_US=$(sed -n 's/^usable_us=\(-\?[0-9]*\).*/\1/p' "$out" | head -1)
  DPID[$m]=$(sed -n 's/^usable_us=.* pid=\([0-9]*\).*/\1/p' "$out" | head -1)
  if [ -z "$USABLE_US" ] || [ "$USABLE_US" -lt 0 ]; then
    echo "mount failed: ${c[*]}" >&2; tail -5 "$W/tmp/daemons.log" >&2 || true; return 1
  fi
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
field() { sed -n "s/.*\b$1=\([-0-9.]*\).*/\1/p"; }   # field NAME < "a=1 b=2"
kstats() { # MNT: kpackfs counters, one "name value" per line
  python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.kpackfs.stats").decode().strip())' "$1"
}
kstat() { kstats "$1" | awk -v k="$2" '$1 == k { print $2 }'; }
# CPU time of all threads (a thread may end between the glob and the read: the daemon's short-lived ones)
cpu_ns() { { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
cpu_since() { echo "($(cpu_ns "$1") - $2) / 1000000000" | bc -l; }                                      # PID NS0 -> seconds
fsize() { stat -Lc %s "$1"; }
rotate() { # N WORD...: the words rotated left by N (which variant goes first changes every repetition)
  local n=$1; shift; local a=("$@"); local k=$(( n % ${#a[@]} ))
  echo "${a[@]:k}" "${a[@]:0:k}"
}

# --- preconditions -----------------------------------------------------------
busy() { pgrep -af 'fuzz/loop.sh|cargo-fuzz|fuzz/target|kpackfs-test|cargo test|rustc ' | grep -v "pgrep" || true; }
figure() { # N title: announce a figure; the sampler below notes background work during it
  say "$1. $2"
  echo "$1" > "$W/tmp/figure"
}
busy_sampler() { # every 2 s: which figure ran while fuzzing/tests/compiles were running
  while :; do
    local b; b=$(busy)
    # "-" before the first figure (the suite's own build): not a figure.
    [ -n "$b" ] && echo "$(cat "$W/tmp/figure" 2>/dev/null || echo -) $(echo "$b" | head -2 | cut -c1-100 | paste -sd';')" >> "$W/tmp/busy.log"
    sleep 2
  done
}
b=$(busy)
if [ -n "$b" ]; then
  echo "bench/run.sh: background load that would distort the figures:" >&2; echo "$b" | sed 's/^/   /' >&2
  if [ "$BUSY_WAIT" -gt 0 ]; then
    echo "   waiting up to ${BUSY_WAIT}s for it to end" >&2
    end=$(( $(date +%s) + BUSY_WAIT ))
    while [ -n "$(busy)" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 10; done
    [ -z "$(busy)" ] || { echo "bench/run.sh: still busy; giving up" >&2; exit 1; }
  else
    echo "   (smoke mode: going on; figures are not asserted)" >&2
  fi
fi

say "inputs"
need=()
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p"); done
command -v python3 >/dev/null || need+=(python3)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install -y ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }
fi

rm -rf "$W/tmp" "$W/out" "$RAW" "$CMDS"
mkdir -p "$W/bin" "$W/tmp" "$MNT" "$STUB"
for m in "$MNT"/*; do [ -e "$m" ] && is_mounted "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }; done

busy_sampler & SAMPLER=$!
say "build"
(cd "$ROOT" && cargo build --release --locked -q -p kpackfs)
cp "${CARGO_TARGET_DIR:-$ROOT/target}/release/kpackfs" "$K"
src_state() { echo "$(git -C "$ROOT" rev-parse --short HEAD) diff:$(git -C "$ROOT" diff HEAD -- core fs-linux Cargo.lock | sha256sum | cut -c1-12)"; }
SRC_STATE=$(src_state)
cargo build --release --locked -q --manifest-path "$ROOT/bench/plainfs/Cargo.toml" --target-dir "${CARGO_TARGET_DIR:-$ROOT/target}/bench-plainfs"
cc -O2 -Wall -o "$BT" "$ROOT/bench/tools/bt.c"
cc -O2 -shared -fPIC -o "$STUB/libamdhip64.so.5" "$ROOT/tests/hip-stub/hipstub.c" \
  -Wl,--version-script="$ROOT/tests/hip-stub/hipstub.map" -Wl,-soname,libamdhip64.so.5
cc -O2 -o "$STUB/dlopen_driver" "$ROOT/tests/hip-stub/dlopen_driver.c" -ldl
log "kpackfs $("$K" --version | awk '{print $2}') built from $SRC_STATE (diff: sha256 of the uncommitted changes to core/ fs-linux/ Cargo.lock)"

say "source trees"
mkdir -p "$SRC/lib" "$SRC/data"
for pair in $LIBS; do
  f=${pair%%:*}; l=${pair##*:}
  [ "$SRC/lib/$f" -ef "$SYSLIB/$f" ] || ln -f "$SYSLIB/$f" "$SRC/lib/$f" 2>/dev/null || cp "$SYSLIB/$f" "$SRC/lib/$f"
  ln -sfn "$f" "$SRC/lib/$l"
done
echo hello > "$SRC/hello.txt"
DATA=$SRC/data/random.bin
DATA_BYTES=$((DATA_MB * 1024 * 1024))
if [ "$(stat -c %s "$DATA" 2>/dev/null || echo 0)" != "$DATA_BYTES" ]; then
  log "writing $DATA_MB MiB of random data"
  head -c "$DATA_BYTES" /dev/urandom > "$DATA.tmp" && mv "$DATA.tmp" "$DATA"
fi
rm -rf "$CCOB"; mkdir -p "$CCOB/lib"; echo hello > "$CCOB/hello.txt"
/usr/bin/time -f "%e %M" -o "$W/tmp/rc.time" "$K" recompress --ccob-version 3 "$SRC/lib/$LIB" "$CCOB/lib/$LIB"
ln -sfn "$LIB" "$CCOB/lib/$LIBLINK"
read -r s kb < "$W/tmp/rc.time"; rec recompress.secs "$s"; rec recompress.rss_kb "$kb"
cmd "kpackfs recompress --ccob-version 3 src/lib/$LIB ccob/lib/$LIB"
log "$(du -shL "$SRC" | cut -f1) source, CCOB copy of $LIB made in ${s}s"
FAT=$SRC/lib/$LIB
# The VM host caches the guest's disk: the first read of a file after it was
# written runs at disk speed, later "cold" reads (guest cache dropped) at host
# memory speed (measured here: 1 GiB first read 0.46 GB/s, then 2.0-2.2 GB/s).
# Read every input once so that no variant pays for the host's first read.
log "pre-reading the inputs (host-side cache), then rotating which variant goes first"
cat "$SRC"/lib/* "$DATA" "$CCOB/lib/$LIB" > /dev/null
MK=$MNT/k; MP=$MNT/p; MC=$MNT/c
KLIB=lib/$LIB; KARC=lib/.kpack/$ARCHIVE_NAME

# ---- 1. mount time ------------------------------------------------------------
figure 1 "mount time (command start -> first successful stat inside), $R_MOUNT runs"
cmd "bt mount-wait MNT/hello.txt -- kpackfs mount src MNT --arch $ARCH      # detached (default) mode"
cmd "bt mount-wait MNT/hello.txt -- plainfs src MNT"
for i in $(seq "$R_MOUNT"); do
  mount_start kd "$MK"; rec f1.kpackfs.usable_us "$USABLE_US"; unmount "$MK"
  rec f1.kpackfs.cmd_exit_us "$(sed -n 's/^exit_us=\([0-9]*\).*/\1/p' "$W/tmp/mount.k.out" | head -1)"
  mount_start p "$MP"; rec f1.plainfs.usable_us "$USABLE_US"; unmount "$MP"
done

# ---- 2. first stat / first byte of the transformed library -------------------
figure 2 "first stat and first byte of $LIB right after mounting (cold plan), $R_FIRST runs"
cmd "bt mount-wait MNT/hello.txt -- kpackfs mount src MNT --arch $ARCH -f   # figures 2-5, 7, 8: foreground daemon, so its pid is known"
cmd "bt stat MNT/$KLIB        # on a fresh mount; also: bt first-byte (open + read 1 byte) on another fresh mount; daemon: /proc/PID/io, /proc/PID/task/*/schedstat"
first_round() { # cache-state repetition
  local c=$1 v
  [ "$c" = warm ] && cat "$FAT" > /dev/null
  for v in $(rotate "$2" kpackfs plainfs direct); do
    local path
    case $v in
      kpackfs) MSRC=$SRC mount_start k "$MK"; path=$MK/$KLIB ;;
      plainfs) mount_start p "$MP"; path=$MP/$KLIB ;;
      direct) path=$FAT ;;
    esac
    [ "$c" = cold ] && drop_caches
    local pid=${DPID[$MK]:-}
    local io0="" c0=0; [ $v = kpackfs ] && { io0=$(awk '/^(rchar|syscr|read_bytes)/ {printf "%s ", $2}' "/proc/$pid/io"); c0=$(cpu_ns "$pid"); }
    rec "f2.$c.stat.$v.us" "$("$BT" stat "$path" | field stat_us)"
    if [ $v = kpackfs ]; then
      local io1; io1=$(awk '/^(rchar|syscr|read_bytes)/ {printf "%s ", $2}' "/proc/$pid/io")
      local a0 b0 c0 a1 b1 c1; local cc0=$c0
      read -r a0 b0 c0 <<< "$io0"; read -r a1 b1 c1 <<< "$io1"
      rec "f2.$c.stat.kpackfs.daemon_rchar" $((a1 - a0)); rec "f2.$c.stat.kpackfs.daemon_syscr" $((b1 - b0))
      rec "f2.$c.stat.kpackfs.daemon_disk_read_bytes" $((c1 - c0))
      rec "f2.$c.stat.kpackfs.daemon_cpu_us" "$(echo "$(cpu_since "$pid" "$cc0") * 1000000" | bc -l)"
      unmount "$MK"; MSRC=$SRC mount_start k "$MK"
    elif [ $v = plainfs ]; then
      unmount "$MP"; mount_start p "$MP"
    fi
    [ "$c" = cold ] && drop_caches
    rec "f2.$c.firstbyte.$v.us" "$("$BT" first-byte "$path" | field total_us)"
    case $v in kpackfs) unmount "$MK" ;; plainfs) unmount "$MP" ;; esac
  done
}
for i in $(seq "$R_FIRST"); do first_round cold "$i"; done
for i in $(seq "$R_FIRST"); do first_round warm "$i"; done

# ---- 3. sequential reads --------------------------------------------------------
MSRC=$SRC mount_start k "$MK"
T_BYTES=$(fsize "$MK/$KLIB"); A_BYTES=$(fsize "$MK/$KARC")
unmount "$MK"
rec size.transformed "$T_BYTES"; rec size.archive "$A_BYTES"; rec size.fat "$(fsize "$FAT")"; rec size.data "$DATA_BYTES"
figure 3 "sequential reads: transformed $LIB ($T_BYTES B), archive ($A_BYTES B), unchanged data ($DATA_BYTES B)"
cmd "bt read FILE [BYTES]     # = dd if=FILE bs=1M count=BYTES iflag=count_bytes of=/dev/null"
cmd "python3 bench/tools/archive_ranges.py kpackfs src/lib/$LIB $ARCH > ranges.txt; bt read-ranges src/lib/$LIB ranges.txt 0|1   # the archive's source ranges read directly; 1 = fadvise(WILLNEED) of the next range first"
python3 "$ROOT/bench/tools/archive_ranges.py" "$K" "$FAT" "$ARCH" > "$W/tmp/ranges.txt"
rec archive.source_ranges "$(wc -l < "$W/tmp/ranges.txt")"
cmd "cold: fresh mount, stat FILE, sync; echo 3 > /proc/sys/vm/drop_caches, then bt read; warm: bt read once, then $R_WARM timed"
# item -> "path-in-view bytes baseline-path-in-source"
declare -A ITEM_VIEW=([transformed]=$KLIB [archive]=$KARC [data]=data/random.bin)
declare -A ITEM_SRC=([transformed]=lib/$LIB [archive]=lib/$LIB [data]=data/random.bin)
declare -A ITEM_BYTES=([transformed]=$T_BYTES [archive]=$A_BYTES [data]=$DATA_BYTES)
seq_path() { # variant item
  case $1 in
    kpackfs) echo "$MK/${ITEM_VIEW[$2]}" ;;
    default) echo "$MD/${ITEM_VIEW[$2]}" ;;
    materialized) echo "$MM/${ITEM_VIEW[$2]}" ;;
    plainfs) echo "$MP/${ITEM_SRC[$2]}" ;;
    direct) echo "$SRC/${ITEM_SRC[$2]}" ;;
  esac
}
for i in $(seq "$R_COLD"); do
  for it in transformed transformed transformed archive data; do   # the 14 MB file 3x: its reads are short and noisy
    for v in $(rotate "$i" kpackfs plainfs direct); do
      case $v in kpackfs) MSRC=$SRC mount_start k "$MK" ;; plainfs) mount_start p "$MP" ;; esac
      path=$(seq_path $v $it)
      stat "$path" > /dev/null
      drop_caches
      [ $v = kpackfs ] && t0=$(cpu_ns "${DPID[$MK]}")
      r=$("$BT" read "$path" "${ITEM_BYTES[$it]}")
      rec "f3.cold.$it.$v.mbps" "$(echo "$r" | field mbps)"
      if [ $v = kpackfs ]; then
        rec "f3.cold.$it.kpackfs.daemon_cpu_s" "$(cpu_since "${DPID[$MK]}" "$t0")"
        rec "f3.cold.$it.kpackfs.plans_built" "$(kstat "$MK" plans_built)"
      fi
      case $v in kpackfs) unmount "$MK" ;; plainfs) unmount "$MP" ;; esac
    done
    if [ $it = archive ]; then   # the archive's own source ranges, read directly (without and with prefetch)
      for ahead in 0 1; do
        drop_caches
        rec "f3.cold.archive.direct_ranges_ahead$ahead.mbps" "$("$BT" read-ranges "$FAT" "$W/tmp/ranges.txt" $ahead | field mbps)"
      done
    fi
  done
done
MSRC=$SRC mount_start k "$MK"; mount_start p "$MP"
# A second kpackfs mount keeps local copies of synthesized files and serves
# them through kernel passthrough once written (mount --materialize).
MM=$MNT/m; rm -rf "$W/copies"
MSRC=$SRC mount_start k "$MM" --materialize --cache-dir "$W/copies"
for it in transformed archive; do cat "$(seq_path materialized $it)" > /dev/null; done
# And a mount with the default options (a cache directory): it copies a file
# the daemon opens a second time and serves later opens from the copy.
MD=$MNT/d; rm -rf "$W/copies-default"
MSRC=$SRC mount_start k "$MD" --cache-dir "$W/copies-default" --archive-compression auto
for it in transformed archive; do for n in 1 2; do cat "$(seq_path default $it)" > /dev/null; done; done
copies() { find "$1" -maxdepth 1 -name '*.data' ! -name 'tmp.*' 2>/dev/null | wc -l; }
for i in $(seq 300); do [ "$(copies "$W/copies")" -ge 2 ] && [ "$(copies "$W/copies-default")" -ge 2 ] && break; sleep 0.1; done
cmd "warm, materialized: kpackfs mount SRC MNT --arch $ARCH --materialize --cache-dir DIR; read each file once, wait for its copy (DIR/*.data), then as warm"
cmd "warm, default: kpackfs mount SRC MNT --arch $ARCH --cache-dir DIR (the default options but for DIR); read each file twice, wait for its copy, then as warm; kpackfs: --cache-dir none (no copies: the FUSE page cache)"
for it in transformed archive data; do
  for v in kpackfs default materialized plainfs direct; do "$BT" read "$(seq_path $v $it)" "${ITEM_BYTES[$it]}" > /dev/null; done
  r0=$(kstat "$MK" reads)
  for i in $(seq "$R_WARM"); do   # interleaved, so drifts hit all variants alike
    for v in kpackfs default materialized plainfs direct; do
      rec "f3.warm.$it.$v.mbps" "$("$BT" read "$(seq_path $v $it)" "${ITEM_BYTES[$it]}" | field mbps)"
    done
  done
  rec "f3.warm.$it.kpackfs.daemon_reads" $(( $(kstat "$MK" reads) - r0 ))
done
rec f3.warm.default.copies_used "$(kstat "$MD" copies_used)"
rec f3.warm.default.copies_queued "$(kstat "$MD" copies_queued)"
unmount "$MM"; unmount "$MD"

# ---- 4. random 4 KiB reads (fio) ---------------------------------------------
figure 4 "fio random 4 KiB reads over the archive's byte range, $R_FIO rounds of ${FIO_SECS}s per job"
A4=$(( A_BYTES / 4096 * 4096 ))
ln -sfn "$MK/$KARC" "$W/tmp/archive.kpack"   # fio splits file names at ':'
fio_job() { # name file direct(0|1)
  local o=$W/tmp/fio.$1.json
  # Re-warm what the job reads through (the daemons pread the source; DAMON
  # pages out page cache idle for 30 s on this VM), the same for every variant.
  cat "$FAT" "$MK/$KARC" > /dev/null
  taskset -c 0 fio --name="$1" --filename="$2" --readonly --rw=randread --bs=4k --size="$A4" --ioengine=psync \
    --direct="$3" --invalidate=0 --runtime="$FIO_SECS" --ramp_time="$FIO_RAMP" --time_based --randrepeat=1 \
    --output-format=json --output="$o" > /dev/null
  local f
  for f in 50.000000 99.000000; do
    rec "f4.$1.p${f%%.*}_us" "$(jq -r ".jobs[0].read.clat_ns.percentile[\"$f\"] / 1000" "$o")"
  done
  rec "f4.$1.iops" "$(jq -r '.jobs[0].read.iops' "$o")"
}
cmd "fio rounds: $R_FIO, variants rotated, fio and both daemons pinned to CPU 0 (taskset), cat src/lib/$LIB MNT/$KARC > /dev/null before each job; FILE = MNT/$KARC (through a symlink: fio splits names at ':'), src/lib/$LIB (first $A4 bytes) directly and through plainfs"
cmd "fio --name=J --filename=FILE --readonly --rw=randread --bs=4k --size=$A4 --ioengine=psync --direct=1|0 --invalidate=0 --runtime=$FIO_SECS --ramp_time=$FIO_RAMP --time_based --randrepeat=1 --output-format=json"
# fio and both daemons share one vCPU: a wake-up across vCPUs costs 50-250 us
# on this VM (4 KiB O_DIRECT p50 13-14 us on one vCPU, 65-270 us split), so
# unpinned results depended on where the scheduler put the threads.
pin() { local t; for t in /proc/"$1"/task/*; do taskset -pc "$2" "${t##*/}" > /dev/null; done; }
ALLCPUS=0-$(( $(nproc) - 1 ))
pin "${DPID[$MK]}" 0; pin "${DPID[$MP]}" 0
for i in $(seq "$R_FIO"); do   # rounds, variants rotated
  for v in $(rotate "$i" kpackfs source plainfs); do
    case $v in kpackfs) f=$W/tmp/archive.kpack ;; source) f=$FAT ;; plainfs) f=$MP/lib/$LIB ;; esac
    fio_job "direct.$v" "$f" 1
  done
done
for i in $(seq "$R_FIO"); do
  for v in $(rotate "$i" kpackfs source plainfs); do
    case $v in kpackfs) f=$W/tmp/archive.kpack ;; source) f=$FAT ;; plainfs) f=$MP/lib/$LIB ;; esac
    fio_job "buffered.$v" "$f" 0
  done
done
pin "${DPID[$MK]}" "$ALLCPUS"; pin "${DPID[$MP]}" "$ALLCPUS"

# ---- 5. dlopen ---------------------------------------------------------------------
figure 5 "dlopen through the test HIP runtime, $R_DL runs (+$W_DL warm-up)"
cmd "LD_LIBRARY_PATH=stub bt runs 1 0 stub/dlopen_driver FILE   # x $R_DL each, alternating FILE = MNT/$KLIB and src/lib/$LIB, after $W_DL warm-up runs"
cmd "KPACK_STUB_OUT=/dev/shm/DIR KPACK_STUB_ARCH=$ARCH LD_LIBRARY_PATH=stub bt runs ... (code-object resolution)"
CO=/dev/shm/kpackfs-bench.$$
dl_path() { if [ "$1" = kpackfs ]; then echo "$MK/$KLIB"; else echo "$FAT"; fi; }
for v in kpackfs original; do   # warm-up
  LD_LIBRARY_PATH=$STUB "$BT" runs "$W_DL" 0 "$STUB/dlopen_driver" "$(dl_path $v)" > /dev/null
  rm -rf "$CO.$v"; mkdir -p "$CO.$v"
  KPACK_STUB_OUT=$CO.$v KPACK_STUB_ARCH=$ARCH LD_LIBRARY_PATH=$STUB "$BT" runs "$W_DL" 0 "$STUB/dlopen_driver" "$(dl_path $v)" > /dev/null
done
for i in $(seq "$R_DL"); do     # one run each, alternating
  for v in $(rotate "$i" kpackfs original); do
    rec "f5.dlopen.$v.us" "$(LD_LIBRARY_PATH=$STUB "$BT" runs 1 0 "$STUB/dlopen_driver" "$(dl_path $v)")"
  done
done
l0=$(kstat "$MK" lookups); o0=$(kstat "$MK" opens)
for i in $(seq "$R_DL"); do
  for v in $(rotate "$i" kpackfs original); do
    rec "f5.resolve.$v.us" "$(KPACK_STUB_OUT=$CO.$v KPACK_STUB_ARCH=$ARCH LD_LIBRARY_PATH=$STUB "$BT" runs 1 0 "$STUB/dlopen_driver" "$(dl_path $v)")"
  done
done
rec f5.resolve.kpackfs.daemon_lookups_per_run $(( ($(kstat "$MK" lookups) - l0) / R_DL ))
rec f5.resolve.kpackfs.daemon_opens_per_run $(( ($(kstat "$MK" opens) - o0) / R_DL ))
for v in kpackfs original; do
  rec "f5.resolve.$v.calls_per_run" $(( $(wc -l < "$CO.$v/log.tsv") / (R_DL + W_DL) ))
  rec "f5.resolve.$v.not_ok" "$(awk -F'\t' '$NF != "OK"' "$CO.$v/log.tsv" | wc -l)"
done
same=1; n=0
for c in "$CO.original"/*.co; do n=$((n + 1)); cmp -s "$c" "$CO.kpackfs/$(basename "$c")" || same=0; done
rec f5.resolve.code_objects "$n"; rec f5.resolve.identical "$same"
rm -rf "$CO.kpackfs" "$CO.original"
unmount "$MK"; unmount "$MP"

# ---- 6. bake ---------------------------------------------------------------------------
figure 6 "kpackfs bake for $ARCH (wall, peak RSS)"
if [ $MODE = full ]; then
  cmd "bash bench/bake.sh $ARCH"
  KPACKFS=$K bash "$ROOT/bench/bake.sh" "$ARCH" | tee "$W/tmp/bake.out" >&2
  bval() { grep -F "$1" "$W/tmp/bake.out" | awk '{ print $(NF-3), $(NF-1) }'; }
  read -r s mb <<< "$(bval 'cp of the fat library (cold)')"; rec f6.cp.cold.secs "$s"
  read -r s mb <<< "$(bval 'cp of the fat library (warm)')"; rec f6.cp.warm.secs "$s"
  read -r s mb <<< "$(bval "(cold)" | tail -1)"; rec f6.bake.cold.secs "$s"; rec f6.bake.cold.rss_mb "$mb"
  read -r s mb <<< "$(bval "(warm)" | tail -1)"; rec f6.bake.warm.secs "$s"; rec f6.bake.warm.rss_mb "$mb"
else
  cmd "/usr/bin/time -f '%e %M' kpackfs bake src OUT --arch $ARCH --cache-dir none -q   (cold and warm) and cp -r src OUT (same run)"
  drop_caches; /usr/bin/time -f "%e %M" -o "$W/tmp/t" cp -r "$SRC" "$W/out-cp"; read -r s kb < "$W/tmp/t"; rec f6.cp.cold.secs "$s"; rm -rf "$W/out-cp"
  /usr/bin/time -f "%e %M" -o "$W/tmp/t" cp -r "$SRC" "$W/out-cp"; read -r s kb < "$W/tmp/t"; rec f6.cp.warm.secs "$s"; rm -rf "$W/out-cp"
  drop_caches; /usr/bin/time -f "%e %M" -o "$W/tmp/t" "$K" bake "$SRC" "$W/out1" --arch "$ARCH" --cache-dir none -q; read -r s kb < "$W/tmp/t"
  rec f6.bake.cold.secs "$s"; rec f6.bake.cold.rss_mb "$(echo "$kb / 1024" | bc -l)"
  /usr/bin/time -f "%e %M" -o "$W/tmp/t" "$K" bake "$SRC" "$W/out2" --arch "$ARCH" --cache-dir none -q; read -r s kb < "$W/tmp/t"
  rec f6.bake.warm.secs "$s"; rec f6.bake.warm.rss_mb "$(echo "$kb / 1024" | bc -l)"
  cmp "$W/out1/$KARC" "$W/out2/$KARC"; rm -rf "$W/out1" "$W/out2"
fi

# ---- 7. daemon peak RSS --------------------------------------------------------------
figure 7 "daemon peak RSS (VmHWM) while every file of the view is read once"
cmd "kpackfs mount SRC MNT --arch $ARCH -f [--cache-size 16M [--threads 1]] &  find MNT -type f -print0 | xargs -0 cat > /dev/null; grep VmHWM /proc/PID/status   # SRC = src or ccob; diagnostic: MALLOC_MMAP_THRESHOLD_=131072"
# diagnostics (no target): one worker thread; glibc's dynamic mmap threshold pinned
# (freed decode buffers go back to the kernel at once)
for tc in uncompressed:default ccob:default uncompressed:16M ccob:16M ccob:16M-1thread ccob:16M-mmapthreshold; do
  tree=${tc%%:*}; cs=${tc##*:}
  (
    s=$SRC; [ $tree = ccob ] && s=$CCOB
    extra=(); [ $cs != default ] && extra=(--cache-size 16M)
    [ $cs = 16M-1thread ] && extra+=(--threads 1)
    [ $cs = 16M-mmapthreshold ] && export MALLOC_MMAP_THRESHOLD_=131072
    MSRC=$s mount_start k "$MK" "${extra[@]}"
    pid=${DPID[$MK]}
    t0=$(now)
    find "$MK" -type f -print0 | xargs -0 cat > /dev/null
    rec "f7.$tree.$cs.stream_secs" "$(echo "$(now) - $t0" | bc -l)"
    rec "f7.$tree.$cs.vmhwm_kb" "$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")"
    rec "f7.$tree.$cs.vmrss_kb" "$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")"
    rec "f7.$tree.$cs.daemon_cpu_s" "$(cpu_since "$pid" 0)"
    rec "f7.$tree.$cs.cache_misses" "$(kstat "$MK" cache_misses)"
    rec "f7.$tree.$cs.bytes_served" "$(kstat "$MK" bytes_served)"
    unmount "$MK"
  )
done

# ---- 8. CCOB-compressed source ---------------------------------------------------------
figure 8 "CCOB v3 (zstd) source: archive reads through the decompression LRU"
cmd "kpackfs mount ccob MNT --arch $ARCH -f [--cache-size 2G]; uncompressed: kpackfs mount src MNT2 --arch $ARCH -f"
cmd "cold: fresh mount, stat archive, drop caches, bt read ARCHIVE; warm page cache: bt read again; warm daemon: bt read ARCHIVE $A_BYTES 1048576 direct (O_DIRECT: skips the kernel page cache, so every read reaches the daemon)"
MSRC=$SRC mount_start k "$MK"; MSRC=$CCOB mount_start k "$MC"
rec f8.size.uncompressed "$(fsize "$MK/$KARC")"; rec f8.size.ccob "$(fsize "$MC/$KARC")"
cmp -s "$MK/$KARC" "$MC/$KARC" && rec f8.identical 1 || rec f8.identical 0
rec f8.transformed_identical "$(cmp -s "$MK/$KLIB" "$MC/$KLIB" && echo 1 || echo 0)"
unmount "$MK"; unmount "$MC"
for i in $(seq "$R_CCOB"); do
  for v in $(rotate "$i" uncompressed ccob ccob2g); do
    m=$MK; s=$SRC; extra=()
    [ $v != uncompressed ] && { m=$MC; s=$CCOB; }
    [ $v = ccob2g ] && extra=(--cache-size 2G)
    MSRC=$s mount_start k "$m" "${extra[@]}"
    pid=${DPID[$m]}
    if [ $v != ccob2g ]; then
      stat "$m/$KARC" > /dev/null; drop_caches
      t0=$(cpu_ns "$pid")
      rec "f8.cold.$v.secs" "$("$BT" read "$m/$KARC" | field secs)"
      rec "f8.cold.$v.daemon_cpu_s" "$(cpu_since "$pid" "$t0")"
      for j in $(seq "$R_WARM"); do rec "f8.warm_pagecache.$v.secs" "$("$BT" read "$m/$KARC" | field secs)"; done
    else
      "$BT" read "$m/$KARC" "$A_BYTES" 1048576 direct > /dev/null
    fi
    "$BT" read "$m/$KARC" "$A_BYTES" 1048576 direct > /dev/null
    t0=$(cpu_ns "$pid")
    rec "f8.warm_daemon.$v.secs" "$("$BT" read "$m/$KARC" "$A_BYTES" 1048576 direct | field secs)"
    rec "f8.warm_daemon.$v.daemon_cpu_s" "$(cpu_since "$pid" "$t0")"
    rec "f8.warm_daemon.$v.cache_hits" "$(kstat "$m" cache_hits)"
    rec "f8.warm_daemon.$v.cache_misses" "$(kstat "$m" cache_misses)"
    unmount "$m"
  done
done

# ---- 9. CCOB source, compressed archives and the cache directory ----------------------
figure 9 "CCOB v3 source with --archive-compression auto: archive size, first stat/read with a cold and a warm cache dir, slim ratio, RSS"
cmd "python3 bench/tools/frames.py src/lib/$LIB $ARCH   # the target's code objects from the uncompressed bundles, each through zstd -3 --no-check: the sum of level-3 frames, without kpackfs"
cmd "kpackfs mount ccob MNT --arch $ARCH -f --archive-compression auto --cache-dir DIR   # DIR emptied first (cold cache dir) or as the previous mount left it (warm)"
cmd "cold cache dir: bt stat MNT/$KARC (decode every bundle + compress + write DIR), bt read MNT/$KARC; warm cache dir: fresh mount, bt stat, bt read (page cache warm; and again after drop_caches: page cache cold); VmHWM of the daemon"
cmd "baseline of the cold stat: kpackfs bake ccob OUT --arch $ARCH --archive-compression none --cache-dir none (decode every bundle, write the objects) + zstd -3 -T0 --no-check OUT/$KARC (compress them)"
cmd "baseline of the first read: bt read of a plain file of the archive's size on local disk (page cache warm, and after drop_caches)"
cmd "slim ratio: du -B1 (allocated bytes) of MNT/$KLIB + MNT/$KARC over du -B1 of the source library, for src and ccob, archives auto (and none for ccob)"
python3 "$ROOT/bench/tools/frames.py" "$FAT" "$ARCH" > "$W/tmp/frames.txt"
rec f9.frames.objects "$(field objects < "$W/tmp/frames.txt")"
rec f9.frames.raw_bytes "$(field raw_bytes < "$W/tmp/frames.txt")"
rec f9.frames.zstd3_bytes "$(field zstd3_bytes < "$W/tmp/frames.txt")"
CD=$W/cachedir
slim() { # TREE MNT: allocated bytes of the view's library + archives / the source library's
  local v s
  v=$(du -sB1 "$2/$KLIB" "$2/$KARC" | awk '{ t += $1 } END { print t }')
  s=$(du -sB1 "$1/lib/$LIB" | cut -f1)
  echo "$v / $s" | bc -l
}
MSRC=$SRC mount_start k "$MK" --archive-compression auto; rec f9.slim.src_auto "$(slim "$SRC" "$MK")"; unmount "$MK"
MSRC=$CCOB mount_start k "$MC" --archive-compression none; rec f9.slim.ccob_none "$(slim "$CCOB" "$MC")"
rec f9.size.none "$(fsize "$MC/$KARC")"; unmount "$MC"
rm -rf "$CD"; MSRC=$CCOB mount_start k "$MC" --archive-compression auto --cache-dir "$CD"
rec f9.slim.ccob_auto "$(slim "$CCOB" "$MC")"
A9=$(fsize "$MC/$KARC"); rec f9.size.auto "$A9"
toc=$("$K" inspect "$MC/$KARC" | sed -n 's/.*TOC at 0x\([0-9a-f]*\).*/\1/p' | head -1)
rec f9.size.header_and_toc $(( 64 + A9 - 16#$toc ))
same=1
unmount "$MC"
# Both loaders must resolve the auto archive to the uncompressed original's code objects.
MSRC=$CCOB mount_start k "$MC" --archive-compression auto --cache-dir "$CD"
rm -rf "$W/tmp/res.fat" "$W/tmp/res.auto"
"$K" resolve "$FAT" --arch "$ARCH" --out "$W/tmp/res.fat" > /dev/null 2>&1 && \
  "$K" resolve "$MC/$KLIB" --arch "$ARCH" --loader both --out "$W/tmp/res.auto" > /dev/null 2>&1 && \
  diff -r -q "$W/tmp/res.fat" "$W/tmp/res.auto" > /dev/null || same=0
rec f9.resolve.code_objects "$(ls "$W/tmp/res.auto" 2>/dev/null | wc -l)"
rm -rf "$W/tmp/res.fat" "$W/tmp/res.auto"
rec f9.resolve_identical "$same"
unmount "$MC"
PLAIN9=$W/plain9.bin
head -c "$A9" /dev/urandom > "$PLAIN9"; cat "$PLAIN9" > /dev/null
rm -rf "$W/out9"
for i in $(seq "$R_CCOB"); do
  # baseline: one decode of the bundles + the compression
  /usr/bin/time -f "%e %M" -o "$W/tmp/t" "$K" bake "$CCOB" "$W/out9" --arch "$ARCH" --archive-compression none --cache-dir none -q
  read -r s kb < "$W/tmp/t"; rec f9.baseline.decode.secs "$s"
  /usr/bin/time -f "%e %M" -o "$W/tmp/t" zstd -3 -T0 --no-check -q -f "$W/out9/$KARC" -o "$W/tmp/none.zst"
  read -r s kb < "$W/tmp/t"; rec f9.baseline.compress.secs "$s"
  rm -rf "$W/out9" "$W/tmp/none.zst"
  # cold cache dir
  rm -rf "$CD"; MSRC=$CCOB mount_start k "$MC" --archive-compression auto --cache-dir "$CD"; pid=${DPID[$MC]}
  rec f9.cold.stat.us "$("$BT" stat "$MC/$KARC" | field stat_us)"
  rec f9.cold.read.mbps "$("$BT" read "$MC/$KARC" "$A9" | field mbps)"
  rec f9.cold.vmhwm_kb "$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")"
  unmount "$MC"
  # warm cache dir, page cache warm (the entry was just written)
  MSRC=$CCOB mount_start k "$MC" --archive-compression auto --cache-dir "$CD"; pid=${DPID[$MC]}
  rec f9.warm.stat.us "$("$BT" stat "$MC/$KARC" | field stat_us)"
  for v in $(rotate "$i" kpackfs plain); do
    case $v in
      kpackfs) rec f9.warm.read.mbps "$("$BT" read "$MC/$KARC" "$A9" | field mbps)" ;;
      plain) rec f9.plain.warm.mbps "$("$BT" read "$PLAIN9" "$A9" | field mbps)" ;;
    esac
  done
  rec f9.warm.vmhwm_kb "$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")"
  unmount "$MC"
  # warm cache dir, page cache cold
  MSRC=$CCOB mount_start k "$MC" --archive-compression auto --cache-dir "$CD"
  drop_caches
  rec f9.warmcold.stat.us "$("$BT" stat "$MC/$KARC" | field stat_us)"
  drop_caches
  rec f9.warmcold.read.mbps "$("$BT" read "$MC/$KARC" "$A9" | field mbps)"
  unmount "$MC"
  drop_caches
  rec f9.plain.cold.mbps "$("$BT" read "$PLAIN9" "$A9" | field mbps)"
done
rm -rf "$CD"

# ---- 10. process start ------------------------------------------------------------------
figure 10 "process start: dlopen + code-object resolution through the view, a baked tree and the fat original (bench/start.sh)"
SMOKE_ARG=(); [ $MODE = smoke ] && SMOKE_ARG=(--smoke)
cmd "bash bench/start.sh ${SMOKE_ARG[*]}   # per sample: KPACK_STUB_OUT=/dev/shm/DIR KPACK_STUB_ARCH=gfx90a:sramecc+:xnack- LD_LIBRARY_PATH=stub bt runs 1 0 stub/dlopen_driver LIB; LIB = the fat original, MNT/lib/LIB (kpackfs mount --arch gfx90a, --cache-dir DIR filled by a previous mount, or none), a kpackfs bake of it; cold: fresh mount + drop_caches, then warm on the same mount"
KPACKFS=$K bash "$ROOT/bench/start.sh" "${SMOKE_ARG[@]}" --raw "$RAW" >&2

# ---- 11. large tree walks -----------------------------------------------------------------
figure 11 "walks of a generated install-shaped tree: kpackfs vs plainfs vs direct (bench/tree.sh)"
cmd "bash bench/tree.sh ${SMOKE_ARG[*]}   # per sample: fresh mount (plainfs over the source, and over hard links of just the entries the view shows; kpackfs mount --arch gfx90a --cache-dir none | empty DIR | DIR a previous mount filled), drop_caches, find M -type f [-printf '%s\\n'] (cold), the same again (warm)"
KPACKFS=$K bash "$ROOT/bench/tree.sh" "${SMOKE_ARG[@]}" --raw "$RAW" >&2

# ---- report ----------------------------------------------------------------------------
kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=
if [ -s "$W/tmp/busy.log" ]; then
  for f in $(awk '$1 ~ /^[0-9]+$/ { print $1 }' "$W/tmp/busy.log" | sort -u); do rec "busy.f$f" 1; done
  log "background work was seen during figures: $(awk '{ print $1 }' "$W/tmp/busy.log" | sort -u | paste -sd' ')"
fi
T_END=$(now)
rec suite.secs "$(echo "$T_END - $T_START" | bc -l)"
say "report"
{
  echo "mode=$MODE"
  echo "arch=$ARCH"
  echo "lib=$LIB"
  echo "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "nproc=$(nproc)"
  echo "ram=$(free -h | awk '/^Mem/ { print $2 }')"
  echo "kernel=$(uname -srm)"
  echo "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "disk=$(df -h --output=source,fstype,size,used,avail "$W" | tail -1 | tr -s ' ')"
  echo "lsblk=$(lsblk -dno NAME,SIZE,ROTA,TYPE,MODEL 2>/dev/null | tr -s ' ' | paste -sd ';')"
  echo "kpackfs=$SRC_STATE$( [ "$(src_state)" = "$SRC_STATE" ] || echo " (WARNING: the sources changed during the run, now $(src_state); the measured binary is the snapshot built at the start)")"
  D=/sys/kernel/mm/damon/admin/kdamonds/0
  if [ "$(cat $D/state 2>/dev/null)" = on ]; then
    S=$D/contexts/0/schemes/0
    echo "damon=on: DAMON scheme '$(cat $S/action)' of memory regions idle for >= $(cat $S/access_pattern/age/min) aggregation intervals of $(( $(cat $D/contexts/0/monitoring_attrs/intervals/aggr_us) / 1000 )) ms, quota $(( $(cat $S/quotas/bytes) >> 20 )) MiB per $(cat $S/quotas/reset_interval_ms) ms (evicts page cache even with free memory)"
  else
    echo "damon=off"
  fi
  echo "load=start $LOAD_START, end $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$W/meta.env"
python3 "$ROOT/bench/report.py" --raw "$RAW" --meta "$W/meta.env" --commands "$CMDS" \
  --analysis "$ROOT/bench/ANALYSIS.md" --out "$RESULTS"
echo "results: $RESULTS" >&2
