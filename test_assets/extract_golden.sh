#!/usr/bin/env bash
# Extracts, with clang-offload-bundler (the independent oracle), the code
# objects of the real .hip_fatbin dumps in test_assets/vectors/generated-golden/
# into test_assets/expected/golden/. Tests compare our parser's extraction
# from every golden fatbin (plain and CCOB) against these files.
# Needs: apt-get install clang-15 (for /usr/lib/llvm-15/bin/clang-offload-bundler), python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vec=$here/vectors
bundler=${CLANG_OFFLOAD_BUNDLER:-/usr/lib/llvm-15/bin/clang-offload-bundler}
[ -x "$bundler" ] || { echo "missing $bundler (apt-get install clang-15)" >&2; exit 1; }
out=$here/expected/golden
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"; mkdir -p "$out"
# Split a section dump into its uncompressed bundles (each starts 4096-aligned
# with the bundle magic; its end is max(offset+size) of its descriptors).
split() {
python3 - "$1" "$2" <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
magic = b'__CLANG_OFFLOAD_BUNDLE__'
n = 0
for pos in range(0, len(data), 4096):
    if data[pos:pos+24] != magic:
        continue
    cnt, = struct.unpack_from('<Q', data, pos + 24)
    p, end = pos + 32, 0
    for _ in range(cnt):
        off, size, idlen = struct.unpack_from('<QQQ', data, p)
        end = max(end, off + size)
        p += 24 + idlen
    open('%s/bundle%d.bin' % (sys.argv[2], n), 'wb').write(data[pos:pos+end])
    n += 1
PY
}
split "$vec/generated-golden/fatbin/libk2_fatbin_two_bundles.bin" "$tmp"
for b in 0 1; do
  for id in $("$bundler" --list --type=o --input="$tmp/bundle$b.bin"); do
    case $id in host-*) continue;; esac
    arch=${id##*--}
    "$bundler" --unbundle --type=o --targets="$id" --input="$tmp/bundle$b.bin" --output="$out/libk2_b${b}_${arch//:/_}.co"
  done
done
(cd "$out" && sha256sum -- *.co > SHA256SUMS && ls -l -- *.co)
