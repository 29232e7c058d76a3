#!/usr/bin/env bash
# Walking a large tree through kpackfs vs bench/plainfs vs the source (issue 23).
#
#   bash bench/tree.sh [--smoke] [--reps N]
#
# Source: a generated tree shaped like a kernel/database install — DIRS
# directories of FILES small files each (text databases, YAML, Python, and
# a quarter of `.co` files with a valid ELF header as GPU code objects have,
# 100 B to 6 KiB), one
# fat library (test_assets/bin/libmulti.so, so `.kpack/` appears in lib/)
# with a symlink to it, and a non-fat host library. Generated once under
# bench/work/tree/src (kept while its shape is unchanged).
#
# Walks: `find M -type f` (readdir only) and `find M -type f -printf
# '%s\n'` (readdir + stat of every entry). Each sample is on a freshly
# mounted daemon with the page cache dropped (sync; drop_caches) just
# before the walk; variants rotate which goes first. Variants:
#   direct    the source tree itself
#   plainfs   bench/plainfs over the source (the plain-FUSE baseline)
#   kpackfs   kpackfs mount --arch gfx90a --cache-dir none
#   kpackfs-warmdir  kpackfs with a cache directory that a previous mount
#             filled (one readdir+stat walk, then unmounted)
# Figures are medians of the samples; ratios are against plainfs measured
# in the same run. Needs root (mounts, drop_caches). Full runs also write
# bench/RESULTS-tree.md. KPACKFS=/path/to/kpackfs measures that binary
# instead of building one; KPACKFS_BEFORE=/path/to/kpackfs adds the variant
# `before` (that binary, as `kpackfs`), for before/after ratios in one run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=full; REPS=3
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) MODE=smoke; REPS=1 ;;
    --reps) REPS=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "usage: bash bench/tree.sh [--smoke] [--reps N]" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "bench/tree.sh: must run as root (mounts, drop_caches)" >&2; exit 2; }
bash "$ROOT/.ci/apt-need.sh" bench/tree.sh fuse3 >&2
if [ $MODE = full ]; then DIRS=10; FILES=4000; else DIRS=3; FILES=300; fi
W=$ROOT/bench/work/tree-$MODE
SRC=$W/src; MNT=$W/mnt; CACHE=$W/cache
mkdir -p "$W" "$MNT"

if [ -n "${KPACKFS:-}" ]; then K=$KPACKFS; else
  (cd "$ROOT" && cargo build --release --locked -q -p kpackfs)
  K=${CARGO_TARGET_DIR:-$ROOT/target}/release/kpackfs
fi
cp "$K" "$W/kpackfs"; K=$W/kpackfs   # a rebuild during the run cannot change it
KB=""; [ -n "${KPACKFS_BEFORE:-}" ] && { cp "$KPACKFS_BEFORE" "$W/kpackfs-before"; KB=$W/kpackfs-before; }
cargo build --release --locked -q --manifest-path "$ROOT/bench/plainfs/Cargo.toml" --target-dir "${CARGO_TARGET_DIR:-$ROOT/target}/bench-plainfs"
P=${CARGO_TARGET_DIR:-$ROOT/target}/bench-plainfs/release/plainfs
REV="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- core fs-linux || echo '+uncommitted')"

# --- the tree ------------------------------------------------------------------
SHAPE="dirs=$DIRS files=$FILES v2"
if [ "$(cat "$W/shape" 2>/dev/null)" != "$SHAPE" ]; then
  echo "bench/tree.sh: generating $DIRS x $FILES files under $SRC" >&2
  rm -rf "$SRC" "$W/shape"
  python3 - "$SRC" "$DIRS" "$FILES" <<'EOF'
import os, random, struct, sys
src, dirs, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(23)
for d in range(dirs):
    p = os.path.join(src, "share", "db", f"set{d:02}")
    os.makedirs(p)
    for i in range(files):
        kind = i % 4
        n = rng.randrange(100, 6144)
        if kind == 0:   # a GPU code object's shape: a valid ELF64 header (ET_DYN,
                        # EM_AMDGPU, one null section header), then filler
            ehdr = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, 64, 0, 64, 56, 0, 64, 1, 0)
            name, body = f"kernel_{i:05}.co", ehdr + bytes(64) + bytes(rng.getrandbits(8) for _ in range(16)) * (n // 16)
        elif kind == 1:
            name, body = f"solution_{i:05}.yaml", (f"- {{index: {i}, tile: [{i % 64}, {i % 32}]}}\n" * (n // 40)).encode()
        elif kind == 2:
            name, body = f"perf_{i:05}.txt", (f"{i}-{d}=1.{i % 97}\n" * (n // 12)).encode()
        else:
            name, body = f"mod_{i:05}.py", (f"X_{i} = {i}\n" * (n // 12)).encode()
        with open(os.path.join(p, name), "wb") as f:
            f.write(body)
EOF
  mkdir -p "$SRC/lib"
  cp "$ROOT/test_assets/bin/libmulti.so" "$ROOT/test_assets/bin/libhost.so" "$SRC/lib/"
  ln -s libmulti.so "$SRC/lib/libmulti.so.1"
  echo hello > "$SRC/hello.txt"
  echo "$SHAPE" > "$W/shape"
fi
NFILES=$(find "$SRC" -type f | wc -l)
NDIRS=$(find "$SRC" -type d | wc -l)
# Read every input once so the VM host's own cache is equally warm for every
# variant (see bench/run.sh).
find "$SRC" -type f -print0 | xargs -0 cat > /dev/null

# --- mounts ----------------------------------------------------------------------
declare -A PID=()
stop() { # MNT
  local m=$1
  mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
  if [ -n "${PID[$m]:-}" ]; then wait "${PID[$m]}" 2>/dev/null || true; unset "PID[$m]"; fi
}
cleanup() { local rc=$?; set +e; for m in "${!PID[@]}"; do stop "$m"; done; exit $rc; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
start() { # VARIANT MNT
  local v=$1 m=$2
  mkdir -p "$m"
  case $v in
    plainfs) "$P" "$SRC" "$m" 2>>"$W/daemons.log" & ;;
    kpackfs) "$K" mount -f "$SRC" "$m" --arch gfx90a --cache-dir none 2>>"$W/daemons.log" & ;;
    before) "$KB" mount -f "$SRC" "$m" --arch gfx90a --cache-dir none 2>>"$W/daemons.log" & ;;
    kpackfs-warmdir) "$K" mount -f "$SRC" "$m" --arch gfx90a --cache-dir "$CACHE" 2>>"$W/daemons.log" & ;;
  esac
  PID[$m]=$!
  local i
  for i in $(seq 1000); do [ -e "$m/hello.txt" ] && return; kill -0 "${PID[$m]}" 2>/dev/null || break; sleep 0.01; done
  echo "bench/tree.sh: $v did not come up at $m (see $W/daemons.log)" >&2; exit 1
}
now() { date +%s.%N; }
walk() { # KIND DIR -> "seconds lines"
  local t0 t1 n
  sync; echo 3 > /proc/sys/vm/drop_caches
  t0=$(now)
  case $1 in
    readdir) n=$(find "$2" -type f | wc -l) ;;
    stat) n=$(find "$2" -type f -printf '%s\n' | wc -l) ;;
  esac
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc -l) $n"
}

rm -rf "$CACHE"
start kpackfs-warmdir "$MNT/prime"
find "$MNT/prime" -type f -printf '%s\n' > /dev/null
stop "$MNT/prime"

VARIANTS=(direct plainfs kpackfs kpackfs-warmdir)
[ -n "$KB" ] && VARIANTS+=(before)
RAW=$W/raw.tsv; : > "$RAW"
for r in $(seq "$REPS"); do
  for kind in readdir stat; do
    k=$(( r % ${#VARIANTS[@]} ))
    for v in "${VARIANTS[@]:k}" "${VARIANTS[@]:0:k}"; do
      if [ $v = direct ]; then d=$SRC; else d=$MNT/$v; start "$v" "$d"; fi
      read -r s n <<< "$(walk $kind "$d")"
      [ $v = direct ] || stop "$d"
      printf '%s\t%s\t%s\t%s\n' "$kind" "$v" "$s" "$n" >> "$RAW"
      echo "   $kind $v: ${s}s, $n lines" >&2
    done
  done
done

# --- report ------------------------------------------------------------------------
python3 - "$RAW" "$MODE" "$REPS" "$NFILES" "$NDIRS" "$REV" "$("$K" --version | awk '{print $2}')" "$(cut -d' ' -f1-3 /proc/loadavg)" "${KPACKFS_BEFORE_LABEL:-$KB}" <<'EOF' | tee "$W/RESULTS.md"
import statistics, sys, datetime
raw, mode, reps, nfiles, ndirs, rev, ver, load, before = sys.argv[1:]
s = {}
lines = {}
for l in open(raw):
    kind, v, secs, n = l.split("\t")
    s.setdefault((kind, v), []).append(float(secs))
    lines[(kind, v)] = int(n)
med = {k: statistics.median(v) for k, v in s.items()}
print(f"### Large tree walks ({mode}, median of {reps}, load {load})\n")
print(f"Source: {nfiles} files in {ndirs} directories (bench/tree.sh), one fat library; "
      f"page cache dropped before each walk, each on a fresh mount; kpackfs {ver} at {rev}, "
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.\n")
print("| walk | direct | plainfs | kpackfs | kpackfs / plainfs | kpackfs, warm cache dir | warm dir / plainfs |")
print("|---|---|---|---|---|---|---|")
names = {"readdir": "`find M -type f` (readdir only)", "stat": "`find M -type f -printf '%s\\n'` (readdir + stat)"}
for kind in ("readdir", "stat"):
    g = lambda v: med.get((kind, v))
    ms = lambda x: f"{x * 1000:,.0f} ms" if x is not None else "n/a"
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
    print(f"| {names[kind]} | {ms(g('direct'))} | {ms(g('plainfs'))} | {ms(g('kpackfs'))} | **{ratio(g('kpackfs'), g('plainfs'))}** "
          f"| {ms(g('kpackfs-warmdir'))} | **{ratio(g('kpackfs-warmdir'), g('plainfs'))}** |")
if any(k[1] == "before" for k in med):
    print(f"\nBefore (`{before}`, same run, --cache-dir none):\n")
    print("| walk | kpackfs before | before / plainfs | kpackfs now / plainfs |")
    print("|---|---|---|---|")
    for kind in ("readdir", "stat"):
        g = lambda v: med.get((kind, v))
        print(f"| {names[kind]} | {g('before') * 1000:,.0f} ms | **{g('before') / g('plainfs'):.2f}** | **{g('kpackfs') / g('plainfs'):.2f}** |")
print()
print("Files listed: " + ", ".join(f"{k[1]} {n}" for k, n in sorted(lines.items()) if k[0] == "stat")
      + " (kpackfs also lists the fat library's archives under lib/.kpack/).")
EOF
[ $MODE = full ] && cp "$W/RESULTS.md" "$ROOT/bench/RESULTS-tree.md"
true
