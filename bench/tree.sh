#!/usr/bin/env bash
# Walking a large tree shaped like a real install: kpackfs vs bench/plainfs
# vs the source (issue 23).
#
#   bash bench/tree.sh [--smoke] [--reps N] [--raw FILE]
#
# Source (generated once under bench/work/tree-MODE/src, kept while its
# shape is unchanged; full ~33,000 files, --smoke ~500):
#   lib/rocblas/library/      flat Tensile layout: per arch (gfx90a, gfx1030,
#                             gfx942) Kernels.so-NNN-<arch>.hsaco and
#                             TensileLibrary_*_<arch>.co / .dat, plus generic
#                             TensileLibrary.dat and TensileManifest.txt
#   lib/hipblaslt/library/<arch>/  per-arch directories of the same kinds
#   share/miopen/db/          <arch><cu>.kdb / .db.txt / .HIP.fdb.txt / .model
#   lib/                      five fat libraries from test_assets/bin
#                             (libmulti, libtwo, libpage, librelr, librdc)
#                             with .so.1 symlinks, and libhost.so (not fat)
#   lib/python3.12/site-packages/  a package tree: packages of subpackages
#                             with .py modules and __pycache__/*.pyc, a
#                             .dist-info per package, and one fat library
#                             (torchlike/lib/libtorch_hip.so, libtwo.so)
# Database files are 100 B to 6 KiB; .co/.hsaco files start with a valid
# AMDGPU ELF header as real code objects do. With --arch gfx90a the db
# rules (docs/database-files.md) hide the gfx1030 and gfx942 files (about
# half the tree), so a kpackfs walk returns fewer entries than a walk of the
# source. The targets are judged against plainfs over the same source (the
# daemon's cost over a plain passthrough of what it serves, issue 23's
# baseline); plainfs-same below, a plain walk of exactly the entries the
# view shows, is reported as the stricter reference.
#
# Walks: `find M -type f` (readdir only) and `find M -type f -printf
# '%s\n'` (readdir + stat of every entry). Each sample mounts a fresh
# daemon, drops the page cache (sync; drop_caches), walks (cold), then
# walks again on the same mount (warm: page cache and kernel caches as the
# first walk left them). Variants rotate which goes first. Variants:
#   direct           the source tree itself
#   direct-same      bench/work/tree-MODE/same (see plainfs-same) itself
#   plainfs          bench/plainfs over the source (the plain-FUSE baseline)
#   plainfs-same     bench/plainfs over bench/work/tree-MODE/same: hard links
#                    of the source without what the view hides (rebuilt each
#                    run from the view's listing), i.e. the same entries
#   kpackfs          kpackfs mount --arch gfx90a --cache-dir none
#   kpackfs-colddir  kpackfs with an empty cache directory (first mount ever)
#   kpackfs-warmdir  kpackfs with a cache directory that a previous mount
#                    filled (one readdir+stat walk, then unmounted): the
#                    warm cache directory after a remount
# Figures are medians of the samples; ratios are against plainfs over the
# whole source and against plainfs-same, measured in the same run.
# Targets (issue 23): cold readdir-only kpackfs <= 1.2x plainfs, cold
# readdir+stat <= 1.3x, warm cache dir (kpackfs-warmdir) readdir+stat <= 1.1x.
# Needs root (mounts, drop_caches) and fuse3. Full standalone runs also
# write bench/RESULTS-tree.md; --raw FILE instead appends the samples to
# FILE (bench/run.sh figure 11: keys f11.<cold|warm>.<readdir|stat>.
# <variant>.secs, f11.lines.<kind>.<variant>, f11.source.files/dirs).
# KPACKFS=/path/to/kpackfs measures that binary instead of building one;
# KPACKFS_BEFORE=/path/to/kpackfs adds the variant `before` (that binary, as
# `kpackfs`), for before/after ratios in one run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=full; REPS=3; RAWOUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) MODE=smoke; REPS=1 ;;
    --reps) REPS=$2; shift ;;
    --raw) RAWOUT=$2; shift ;;
    -h|--help) sed -n '2,55p' "$0"; exit 0 ;;
    *) echo "usage: bash bench/tree.sh [--smoke] [--reps N] [--raw FILE]" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "bench/tree.sh: must run as root (mounts, drop_caches)" >&2; exit 2; }
bash "$ROOT/.ci/apt-need.sh" bench/tree.sh fuse3 >&2
# per arch: flat rocBLAS files, hipBLASLt files per arch directory; Python
# packages x subpackages x modules
if [ $MODE = full ]; then FLAT=4000; PERDIR=4000; PKGS=40; SUBS=5; MODS=20
else FLAT=60; PERDIR=60; PKGS=4; SUBS=2; MODS=5; fi
W=$ROOT/bench/work/tree-$MODE
SRC=$W/src; MNT=$W/mnt; CACHE=$W/cache; COLD=$W/colddir; SAME=$W/same
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
SHAPE="install flat=$FLAT perdir=$PERDIR py=$PKGS/$SUBS/$MODS v3"
if [ "$(cat "$W/shape" 2>/dev/null)" != "$SHAPE" ]; then
  echo "bench/tree.sh: generating an install-shaped tree under $SRC" >&2
  rm -rf "$SRC" "$W/shape"
  python3 - "$SRC" "$FLAT" "$PERDIR" "$PKGS" "$SUBS" "$MODS" <<'EOF'
import os, random, struct, sys
src = sys.argv[1]
flat, perdir, pkgs, subs, mods = map(int, sys.argv[2:])
rng = random.Random(23)
ARCHS = ("gfx90a", "gfx1030", "gfx942")
# A GPU code object's shape: a valid ELF64 header (ET_DYN, EM_AMDGPU, one
# null section header), then filler.
EHDR = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, 64, 0, 64, 56, 0, 64, 1, 0)

def put(path, body):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)

def filler(n):
    return bytes(rng.getrandbits(8) for _ in range(16)) * (n // 16)

def tensile(d, arch, i):
    """One Tensile-style file of ARCH in directory D (kinds rotate)."""
    n = rng.randrange(100, 6144)
    kind = i % 3
    if kind == 0:
        put(os.path.join(d, f"Kernels.so-{i:04}-{arch}.hsaco"), EHDR + bytes(64) + filler(n))
    elif kind == 1:
        put(os.path.join(d, f"TensileLibrary_Type_{i:04}_{arch}.co"), EHDR + bytes(64) + filler(n))
    else:
        put(os.path.join(d, f"TensileLibrary_Type_{i:04}_{arch}.dat"), (f"- {{index: {i}, tile: [{i % 64}, {i % 32}]}}\n" * (n // 40)).encode())

lib = os.path.join(src, "lib")
rb = os.path.join(lib, "rocblas", "library")
for arch in ARCHS:
    for i in range(flat):
        tensile(rb, arch, i)
put(os.path.join(rb, "TensileLibrary.dat"), b"generic catalogue\n" * 50)
put(os.path.join(rb, "TensileManifest.txt"), b"manifest\n" * 50)
for arch in ARCHS:
    d = os.path.join(lib, "hipblaslt", "library", arch)
    for i in range(perdir):
        tensile(d, arch, i)
    put(os.path.join(d, "TensileManifest.txt"), b"manifest\n" * 50)
db = os.path.join(src, "share", "miopen", "db")
for arch, cu in (("gfx90a", 68), ("gfx1030", 36), ("gfx942", 304)):
    for name in (f"{arch}{cu}.kdb", f"{arch}{cu}.db.txt", f"{arch}{cu}.HIP.fdb.txt", f"{arch}.tn.model"):
        put(os.path.join(db, name), filler(rng.randrange(1024, 65536)))
put(os.path.join(db, "readme.txt"), b"MIOpen databases\n")
sp = os.path.join(lib, "python3.12", "site-packages")
for p in range(pkgs):
    name = "torchlike" if p == 0 else f"pkg{p:02}"
    put(os.path.join(sp, f"{name}-1.{p}.0.dist-info", "METADATA"), f"Name: {name}\n".encode())
    put(os.path.join(sp, f"{name}-1.{p}.0.dist-info", "RECORD"), b"x,sha256=,1\n" * 20)
    put(os.path.join(sp, f"{name}-1.{p}.0.dist-info", "WHEEL"), b"Wheel-Version: 1.0\n")
    put(os.path.join(sp, name, "__init__.py"), b"")
    for s in range(subs):
        d = os.path.join(sp, name, f"sub{s}")
        for m in range(mods):
            n = rng.randrange(200, 8192)
            put(os.path.join(d, f"mod{m:02}.py"), (f"X_{m} = {m}\n" * (n // 10)).encode())
            put(os.path.join(d, "__pycache__", f"mod{m:02}.cpython-312.pyc"), b"\xcb\r\r\n" + filler(n))
EOF
  for f in libmulti libtwo libpage librelr librdc; do
    cp "$ROOT/test_assets/bin/$f.so" "$SRC/lib/"
    ln -s "$f.so" "$SRC/lib/$f.so.1"
  done
  cp "$ROOT/test_assets/bin/libhost.so" "$SRC/lib/"
  mkdir -p "$SRC/lib/python3.12/site-packages/torchlike/lib"
  cp "$ROOT/test_assets/bin/libtwo.so" "$SRC/lib/python3.12/site-packages/torchlike/lib/libtorch_hip.so"
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
    plainfs-same) "$P" "$SAME" "$m" 2>>"$W/daemons.log" & ;;
    kpackfs) "$K" mount -f "$SRC" "$m" --arch gfx90a --cache-dir none 2>>"$W/daemons.log" & ;;
    before) "$KB" mount -f "$SRC" "$m" --arch gfx90a --cache-dir none 2>>"$W/daemons.log" & ;;
    kpackfs-colddir) rm -rf "$COLD"; "$K" mount -f "$SRC" "$m" --arch gfx90a --cache-dir "$COLD" 2>>"$W/daemons.log" & ;;
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
# The plain baseline over the same listing: hard links of the source without
# what the view hides (the other architectures' database files and their
# directories), so plainfs-same walks as many entries as kpackfs shows.
rm -rf "$SAME"; cp -al "$SRC" "$SAME"
python3 - "$SRC" "$MNT/prime" "$SAME" <<'EOF'
import os, shutil, sys
src, view, same = sys.argv[1:]
def rels(top):
    out = set()
    for d, dirs, files in os.walk(top):
        r = os.path.relpath(d, top)
        out.add(r)
        out.update(os.path.normpath(os.path.join(r, f)) for f in files)
    return out
shown = rels(view)
for d, dirs, files in os.walk(same):
    r = os.path.relpath(d, same)
    for x in list(dirs):
        if os.path.normpath(os.path.join(r, x)) not in shown:
            shutil.rmtree(os.path.join(d, x)); dirs.remove(x)
    for f in files:
        if os.path.normpath(os.path.join(r, f)) not in shown:
            os.remove(os.path.join(d, f))
EOF
ARCHIVES=$(find "$MNT/prime" -path '*/.kpack/*' -type f | wc -l)
stop "$MNT/prime"

VARIANTS=(direct direct-same plainfs plainfs-same kpackfs kpackfs-colddir kpackfs-warmdir)
[ -n "$KB" ] && VARIANTS+=(before)
RAW=$W/raw.tsv; : > "$RAW"
rec() { printf '%s\t%s\n' "$1" "$2" >> "$RAW"; }
rec f11.source.files "$NFILES"; rec f11.source.dirs "$NDIRS"; rec f11.view.archives "$ARCHIVES"
for r in $(seq "$REPS"); do
  for kind in readdir stat; do
    k=$(( r % ${#VARIANTS[@]} ))
    for v in "${VARIANTS[@]:k}" "${VARIANTS[@]:0:k}"; do
      case $v in direct) d=$SRC ;; direct-same) d=$SAME ;; *) d=$MNT/$v; start "$v" "$d" ;; esac
      sync; echo 3 > /proc/sys/vm/drop_caches
      read -r s n <<< "$(walk $kind "$d")"
      read -r s2 n2 <<< "$(walk $kind "$d")"
      case $v in direct*) ;; *) stop "$d" ;; esac
      rec "f11.cold.$kind.$v.secs" "$s"; rec "f11.warm.$kind.$v.secs" "$s2"
      [ "$n" = "$n2" ] || { echo "bench/tree.sh: $v listed $n files, then $n2" >&2; exit 1; }
      [ $r = 1 ] && rec "f11.lines.$kind.$v" "$n"
      echo "   $kind $v: cold ${s}s, warm ${s2}s, $n lines" >&2
    done
  done
done
# The floor under a cold readdir-only walk of the view: a listing must know
# which files are fat binaries (to show `.kpack`), and only their first
# bytes say so. bench/tools/first_pages.c reads the first page of every
# source file, 16 threads at a time, page cache dropped first.
FP=$W/first_pages
cc -O2 -Wall -pthread -o "$FP" "$ROOT/bench/tools/first_pages.c"
for r in $(seq "$REPS"); do
  sync; echo 3 > /proc/sys/vm/drop_caches
  rec f11.cold.first_pages.secs "$("$FP" "$SRC" 16 | sed 's/.*secs=//')"
done
# Every kpackfs variant listed what plainfs-same did, plus the archives.
lines() { awk -F'\t' -v k="f11.lines.$1" '$1 == k { print $2 }' "$RAW"; }
for kind in readdir stat; do
  for v in kpackfs kpackfs-colddir kpackfs-warmdir; do
    [ "$(lines "$kind.$v")" = $(( $(lines "$kind.plainfs-same") + ARCHIVES )) ] || {
      echo "bench/tree.sh: $v listed $(lines "$kind.$v") files; plainfs-same $(lines "$kind.plainfs-same") + $ARCHIVES archives" >&2; exit 1; }
  done
done
[ -n "$RAWOUT" ] && { cat "$RAW" >> "$RAWOUT"; exit 0; }

# --- report ------------------------------------------------------------------------
python3 - "$RAW" "$MODE" "$REPS" "$REV" "$("$K" --version | awk '{print $2}')" "$(cut -d' ' -f1-3 /proc/loadavg)" "${KPACKFS_BEFORE_LABEL:-$KB}" <<'EOF' | tee "$W/RESULTS.md"
import statistics, sys, datetime
raw, mode, reps, rev, ver, load, before = sys.argv[1:]
s = {}
for l in open(raw):
    k, v = l.rstrip("\n").split("\t")
    s.setdefault(k, []).append(float(v))
med = {k: statistics.median(v) for k, v in s.items()}
g = lambda *k: med.get("f11." + ".".join(k))
w = lambda c, kind, v: g(c, kind, v, "secs")
print(f"### Large tree walks ({mode}, median of {reps}, load {load})\n")
print(f"Source: {g('source', 'files'):.0f} files in {g('source', 'dirs'):.0f} directories (bench/tree.sh: "
      f"Tensile-style arch files, MIOpen databases, six fat libraries, a Python package tree); "
      f"each sample on a fresh mount, page cache dropped before the cold walk, the warm walk right after "
      f"on the same mount; kpackfs --arch gfx90a, {ver} at {rev}, "
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.\n")
names = {"readdir": "`find M -type f` (readdir only)", "stat": "`find M -type f -printf '%s\\n'` (readdir + stat)"}
ms = lambda x: f"{x * 1000:,.0f} ms" if x is not None else "n/a"
ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
ks = ("kpackfs", "kpackfs-colddir", "kpackfs-warmdir") + (("before",) if before else ())
print("| walk | page cache | direct | direct-same | plainfs (whole source) | plainfs-same (the view's entries) | "
      + " | ".join(f"{k} | {k} / plainfs | {k} / plainfs-same" for k in ks) + " |")
print("|---|---|---|---|---|---|" + "---|---|---|" * len(ks))
for kind in ("readdir", "stat"):
    for c in ("cold", "warm"):
        p = w(c, kind, "plainfs")
        print(f"| {names[kind]} | {c} | {ms(w(c, kind, 'direct'))} | {ms(w(c, kind, 'direct-same'))} | {ms(p)} | {ms(w(c, kind, 'plainfs-same'))} | "
              + " | ".join(f"{ms(w(c, kind, k))} | **{ratio(w(c, kind, k), p)}** | {ratio(w(c, kind, k), w(c, kind, 'plainfs-same'))}" for k in ks) + " |")
fp, pr = g("cold", "first_pages", "secs"), w("cold", "readdir", "plainfs")
if fp is not None:
    print(f"\nFloor: reading the first page of every source file (16 threads, page cache dropped; "
          f"bench/tools/first_pages.c) takes {ms(fp)}, {ratio(fp, pr)} × plainfs's whole cold readdir-only walk — "
          "what an exact listing must learn before it can say whether a directory shows `.kpack`.")
print("\nTargets (cold): kpackfs readdir-only ≤ 1.2 × plainfs (whole source), readdir + stat ≤ 1.3 ×; "
      "kpackfs-warmdir readdir + stat ≤ 1.1 ×.")
print("\nFiles listed: " + ", ".join(f"{k.split('.')[-1]} {v:.0f}" for k, v in sorted(med.items()) if k.startswith("f11.lines.stat."))
      + " (kpackfs hides the gfx1030/gfx942 database files and adds the fat libraries' archives; "
      "plainfs-same holds the same files without the archives).")
EOF
[ $MODE = full ] && cp "$W/RESULTS.md" "$ROOT/bench/RESULTS-tree.md"
true
