#!/usr/bin/env bash
# Rebuild the kpackfs test assets: small real HIP fat binaries (bin/), the
# code objects clang-offload-bundler extracts from them (expected/), and the
# demo install tree (demo-install/).  See README.md.
#
# Usage: bash test_assets/build.sh        (from any directory)
# Needs: hipcc + rocm-device-libs (Debian/Ubuntu: apt-get install hipcc
#        rocm-device-libs), clang-offload-bundler (LLVM 15, comes with
#        hipcc), binutils (objcopy, readelf, GNU ld >= 2.38), g++, python3.
#
# bin/, expected/ and demo-install/ are deleted and regenerated on every run;
# src/, tools/, vectors/ and README.md are never modified.  At the end build_pe.sh
# adds the Windows PE/COFF assets (needs clang-15, lld-15, llvm-15).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src"
TOOLS="$HERE/tools"

die() { echo "build.sh: error: $*" >&2; exit 1; }

command -v hipcc >/dev/null 2>&1 ||
  die "hipcc not found; install it with: apt-get install hipcc rocm-device-libs"
BUNDLER="${BUNDLER:-}"
if [[ -z "$BUNDLER" ]]; then
  if [[ -x /usr/lib/llvm-15/bin/clang-offload-bundler ]]; then
    BUNDLER=/usr/lib/llvm-15/bin/clang-offload-bundler
  elif command -v clang-offload-bundler >/dev/null 2>&1; then
    BUNDLER="$(command -v clang-offload-bundler)"
  else
    die "clang-offload-bundler not found (expected /usr/lib/llvm-15/bin/clang-offload-bundler; set BUNDLER=...)"
  fi
fi
for t in objcopy readelf g++ python3 sha256sum; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found"
done
export BUNDLER OBJCOPY=objcopy LC_ALL=C
umask 022

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kpackfs-assets.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
OUT="$WORK/bin"
mkdir -p "$OUT"

# hipcc prints a Python traceback from rocm_agent_enumerator when no GPU is
# present and no --offload-arch is given; we always pass explicit targets.
hip() { (cd "$SRC" && hipcc "$@"); }
A2=(--offload-arch=gfx90a:xnack- --offload-arch=gfx1030)

HIPCC_VERSION="$(hipcc --version 2>/dev/null || true)"
CLANG_LINE="$(awk '/clang version/ && !f {print; f=1}' <<<"$HIPCC_VERSION")"
HIP_LINE="$(awk '/^HIP version/ && !f {print; f=1}' <<<"$HIPCC_VERSION")"
echo "== building fat binaries (hipcc: $HIP_LINE; $CLANG_LINE)"

# 1. one TU, four target IDs (feature-qualified and bare processors).
hip -O2 -fPIC -shared \
  --offload-arch=gfx90a:xnack- --offload-arch=gfx90a:xnack+ \
  --offload-arch=gfx1030 --offload-arch=gfx906 \
  multi.hip -o "$OUT/libmulti.so"

# 2. two TUs -> two bundles, two wrappers; bare gfx90a on purpose.
hip -O2 -fPIC -shared --offload-arch=gfx90a --offload-arch=gfx1030 \
  two_a.hip two_b.hip -o "$OUT/libtwo.so"

# 3./4. executables: main TU has no device code, kernel TU has.
hip -O2 -fPIE -pie "${A2[@]}" app_kernels.hip app_main.cpp -o "$OUT/app_pie"
hip -O2 -fno-pie -no-pie "${A2[@]}" app_kernels.hip app_main.cpp -o "$OUT/app_nopie"

# 5. relocatable device code, device-linked into one bundle.  clang 15's
# generated fat-binary object lacks .note.GNU-stack; -z noexecstack keeps
# the library from requiring an executable stack.
hip -O2 -fgpu-rdc -fPIC -shared -Wl,-z,noexecstack "${A2[@]}" \
  rdc_a.hip rdc_b.hip -o "$OUT/librdc.so"

# 6. host-only library.
(cd "$SRC" && g++ -O2 -fPIC -shared host.cpp -o "$OUT/libhost.so")

# 7. like libtwo, but relative relocations packed into DT_RELR.
hip -O2 -fPIC -shared -Wl,-z,pack-relative-relocs "${A2[@]}" \
  relr_a.hip relr_b.hip -o "$OUT/librelr.so"

# 8. one-TU RDC library whose .hip_fatbin ends exactly on a page boundary
# (RDC sections have no trailing NUL; see the comment in src/page.hip).
hip -O2 -fgpu-rdc -fPIC -shared -Wl,-z,noexecstack "${A2[@]}" \
  page.hip -o "$OUT/libpage.so"

BINARIES=(libmulti.so libtwo.so app_pie app_nopie librdc.so libhost.so librelr.so libpage.so)
for b in "${BINARIES[@]}"; do chmod 0755 "$OUT/$b"; done

# Sanity checks on what the linker produced.
for b in "${BINARIES[@]}"; do
  if [[ $b == libhost.so ]]; then
    ! readelf -SW "$OUT/$b" | grep -q '\.hip_fatbin' || die "$b has .hip_fatbin"
  else
    readelf -SW "$OUT/$b" | grep -q ' \.hip_fatbin ' || die "$b: no .hip_fatbin"
    readelf -SW "$OUT/$b" | grep -q ' \.hipFatBinSegment ' || die "$b: no .hipFatBinSegment"
  fi
done
readelf -hW "$OUT/app_nopie" | grep -q 'EXEC' || die "app_nopie is not ET_EXEC"
readelf -hW "$OUT/app_pie" | grep -q 'DYN' || die "app_pie is not ET_DYN"
readelf -SW "$OUT/librelr.so" | grep -q ' \.relr\.dyn ' || die "librelr.so: no .relr.dyn"
readelf -dW "$OUT/librelr.so" | grep -q '(RELR)' || die "librelr.so: no DT_RELR"

echo "== extracting expected code objects"
EXP="$WORK/expected"
for b in "${BINARIES[@]}"; do
  printf '%-12s ' "$b"
  python3 "$TOOLS/extract_expected.py" "$OUT/$b" "$EXP/$b" "$WORK/x/$b"
done
(cd "$OUT" && sha256sum "${BINARIES[@]}") > "$EXP/binaries.sha256"
{
  echo "hipcc: $HIP_LINE"
  echo "clang: $CLANG_LINE"
  echo "ld: $(ld --version | sed -n 1p)"
  echo "bundler: $("$BUNDLER" --version 2>/dev/null | awk '/version/ && !f {sub(/^ +/, ""); print; f=1}')"
} > "$EXP/toolchain.txt"

grep -q $'^fatbin_ends_on_page\t1$' "$EXP/libpage.so/layout.tsv" ||
  echo "build.sh: WARNING: libpage.so's .hip_fatbin does not end on a page boundary with this toolchain; retune PAGE_BLOB_SIZE / the kernel name in src/page.hip" >&2

echo "== assembling demo install"
DEMO="$WORK/demo-install"
mkdir -p "$DEMO/bin" "$DEMO/lib" "$DEMO/share/doc/demo"
install -m 0755 "$OUT/libmulti.so" "$DEMO/lib/libdemo.so.1.0"
ln -s libdemo.so.1.0 "$DEMO/lib/libdemo.so.1"
ln -s libdemo.so.1 "$DEMO/lib/libdemo.so"
install -m 0755 "$OUT/libtwo.so" "$DEMO/lib/libdemo2.so"
install -m 0755 "$OUT/libhost.so" "$DEMO/lib/libhost.so"
install -m 0755 "$OUT/app_pie" "$DEMO/bin/demo_app"

cat > "$DEMO/bin/demo-info" <<'EOF'
#!/bin/sh
# demo-info: describe this demo ROCm-style install prefix.
prefix=$(cd "$(dirname "$0")/.." && pwd)
echo "demo install prefix: $prefix"
echo "libraries:"
ls -l "$prefix/lib" | sed -n 's/^/  /p'
echo "GPU targets shipped: gfx90a gfx1030 gfx906"
EOF
chmod 0755 "$DEMO/bin/demo-info"

cat > "$DEMO/share/doc/demo/README.txt" <<'EOF'
Demo install for kpackfs
========================

A tiny ROCm-style prefix used as the built-in default tree:

  bin/demo_app             PIE executable with HIP device code (gfx90a:xnack-, gfx1030)
  bin/demo-info            shell script (host only)
  lib/libdemo.so.1.0       HIP library: gfx90a:xnack-, gfx90a:xnack+, gfx1030, gfx906
  lib/libdemo.so.1, lib/libdemo.so   symlinks to it
  lib/libdemo2.so          HIP library from two translation units (gfx90a, gfx1030)
  lib/libhost.so           host-only library (no device code)
  lib/rocblas/library/     Tensile-style per-target database files (dummy contents)
  lib/aotriton/kernels/    per-target AOTriton kernel directories (dummy contents)
  share/miopen/db/         per-target MIOpen tuning models (dummy contents)
EOF
cat > "$DEMO/share/doc/demo/sample.csv" <<'EOF'
n,scale,bias,expected_first,expected_last
4,2.0,1.0,1.0,7.0
16,0.5,-1.0,-1.0,6.5
256,1.0,0.0,0.0,255.0
EOF

# Deterministic dummy database files: a text header naming the file
# followed by bytes of a SHA-256 chain seeded with the file's path.
python3 - "$DEMO" <<'EOF'
import hashlib, os, sys
root = sys.argv[1]

def dummy(rel, size, text=False):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    head = ("kpackfs demo dummy file: %s\n" % rel).encode()
    if text:
        body = b"".join(("%s line %d: %s\n" % (os.path.basename(rel), i,
                         hashlib.sha256(("%s/%d" % (rel, i)).encode()).hexdigest()[:32])).encode()
                        for i in range(64))
    else:
        body, h = b"", rel.encode()
        while len(body) < size:
            h = hashlib.sha256(h).digest()
            body += h
    data = (head + body)[:size]
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o644)

for arch in ("gfx90a", "gfx1030", "gfx906"):
    dummy("lib/rocblas/library/TensileLibrary_%s.dat" % arch, 320)
    dummy("lib/rocblas/library/Kernels.so-000-%s.hsaco" % arch, 448)
dummy("lib/rocblas/library/TensileLibrary_fallback.dat", 256)
for arch in ("gfx90a", "gfx1030"):
    dummy("share/miopen/db/%s.tn.model" % arch, 300, text=True)
    dummy("lib/aotriton/kernels/%s/flash.hsaco" % arch, 384)
EOF

# Normalise modes: directories 0755, data 0644, executables 0755.
find "$DEMO" -type d -exec chmod 0755 {} +
find "$DEMO/share" "$DEMO/lib/rocblas" "$DEMO/lib/aotriton" -type f -exec chmod 0644 {} +

echo "== installing into $HERE"
for d in bin expected demo-install; do
  rm -rf "${HERE:?}/$d"
  mv "$WORK/$d" "$HERE/$d"
done

# Final check: every committed binary matches the hash the expected/ files
# were produced from.
(cd "$HERE/bin" && sha256sum --quiet -c ../expected/binaries.sha256) ||
  die "bin/ does not match expected/binaries.sha256"

# The golden fatbin dumps in vectors/ get their oracle extraction too.
echo "== extracting code objects of the golden fatbins in vectors/"
bash "$HERE/extract_golden.sh"

# Windows PE/COFF assets (bin/hip_*.dll, bin/hip_app.exe): the bundles just
# built, wrapped in freestanding PE images made with clang + lld-link.  Also
# runnable on its own (it needs no hipcc).
bash "$HERE/build_pe.sh"
echo "== done"
