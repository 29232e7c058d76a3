#!/usr/bin/env bash
# Seeds the fuzz corpora from the committed test assets and compatibility
# vectors in test_assets/ (real binaries, bundles, CCOBs, archives, markers,
# target IDs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
assets=$here/../../test_assets
vec=$assets/vectors
c=$here/corpus
mkdir -p "$c"/{bundle,target_id,elf_plan,pe_plan,marker,kpack}
# The vectors get a prefix: some share a name (app_pie, app_nopie) with a
# different file in bin/, and both are worth keeping.
for f in "$assets"/bin/*.so "$assets"/bin/app_*; do
  [ -f "$f" ] && cp "$f" "$c/elf_plan/$(basename "$f")"
done
for f in "$vec"/generated-golden/elf/* "$vec"/generated-golden/kpack/split_*; do
  [ -f "$f" ] && cp "$f" "$c/elf_plan/vec_$(basename "$f")"
done
for f in "$assets"/bin/*.dll "$assets"/bin/*.exe; do
  [ -f "$f" ] && cp "$f" "$c/pe_plan/$(basename "$f")"
done
for f in "$vec"/generated-golden/pe/*; do
  [ -f "$f" ] && cp "$f" "$c/pe_plan/vec_$(basename "$f")"
done
cp "$vec"/generated-golden/fatbin/*.bin "$c/bundle/"
cp "$vec"/upstream-kpack/*.kpack "$vec"/generated-golden/kpack/*.kpack "$c/kpack/"
i=0
for t in gfx90a gfx90a:xnack- gfx942:sramecc+:xnack- gfx9-4-generic amdgcn-amd-amdhsa--gfx1100 gfx90a,gfx1030 gfx1250-strict; do
  printf '%s' "$t" > "$c/target_id/$i"; i=$((i+1))
done
python3 - "$c/marker" <<'PY'
import sys
def s(x):
    b = x.encode()
    return (bytes([0xa0 | len(b)]) if len(b) < 32 else bytes([0xd9, len(b)])) + b
out = sys.argv[1]
m = b'\x82' + s('kpack_search_paths') + b'\x91' + s('../.kpack/test_@GFXARCH@.kpack') + s('kernel_name') + s('lib/libk.so')
open(out + '/reference', 'wb').write(m)
open(out + '/extra_key', 'wb').write(b'\x83' + s('x') + b'\x01' + m[1:])
PY
echo "seeded $(find "$c" -type f | wc -l) files"
