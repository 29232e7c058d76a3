#!/usr/bin/env bash
# Build the Windows PE/COFF HIP fat-binary test assets (bin/hip_*.dll,
# bin/hip_app.exe) and their expected code objects (expected/hip_*/), from
# Linux, without hipcc: the device code (the offload bundles) is cut out of
# the committed Linux fat binaries; the host code is a small freestanding C
# stub (src/pe/) cross-compiled with clang for x86_64-pc-windows-msvc and
# linked with lld-link.  See README.md, "PE/COFF assets".
#
# Usage: bash test_assets/build_pe.sh     (from any directory; build.sh calls
#        it at the end)
# Needs: clang-15, lld-15 (lld-link), llvm-15 (llvm-readobj, llvm-dlltool),
#        clang-offload-bundler (/usr/lib/llvm-15/bin, comes with clang-15),
#        objcopy (binutils; or llvm-objcopy), python3, sha256sum.
#        Debian 12: apt-get install clang-15 lld-15 llvm-15 binutils python3
#
# Inputs (committed, made by build.sh): bin/libmulti.so, bin/libtwo.so,
# bin/app_pie and their lines in expected/binaries.sha256 and expected/.
# Outputs (replaced on every run): bin/hip_one.dll, bin/hip_two.dll,
# bin/hip_app.exe, bin/hip_cert.dll, bin/hip_dbg.dll, expected/<those>/, their lines in
# expected/binaries.sha256 and the "pe-" lines of expected/toolchain.txt.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src/pe"
TOOLS="$HERE/tools"
BIN="$HERE/bin"
EXP="$HERE/expected"

die() { echo "build_pe.sh: error: $*" >&2; exit 1; }

# First of the candidates that exists (absolute path) or is on PATH.
pick() {
  local c
  for c in "$@"; do
    if [[ $c == /* ]]; then
      [[ -x $c ]] && { echo "$c"; return; }
    elif command -v "$c" >/dev/null 2>&1; then
      command -v "$c"; return
    fi
  done
  return 1
}
LLVM=/usr/lib/llvm-15/bin
CLANG="${CLANG:-$(pick clang-15 $LLVM/clang)}" || die "clang-15 not found (apt-get install clang-15)"
LLD_LINK="${LLD_LINK:-$(pick $LLVM/lld-link lld-link-15)}" || die "lld-link not found (apt-get install lld-15)"
DLLTOOL="${DLLTOOL:-$(pick $LLVM/llvm-dlltool llvm-dlltool-15)}" || die "llvm-dlltool not found (apt-get install llvm-15)"
READOBJ="${READOBJ:-$(pick llvm-readobj-15 $LLVM/llvm-readobj)}" || die "llvm-readobj not found (apt-get install llvm-15)"
BUNDLER="${BUNDLER:-$(pick $LLVM/clang-offload-bundler clang-offload-bundler)}" || die "clang-offload-bundler not found (apt-get install clang-15)"
OBJCOPY="${OBJCOPY:-$(pick objcopy llvm-objcopy-15 $LLVM/llvm-objcopy)}" || die "objcopy not found"
for t in python3 sha256sum cmp; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found"
done
export BUNDLER READOBJ OBJCOPY LC_ALL=C
umask 022

# PE file -> Linux fat binary its bundles come from (same bundles, same order).
declare -A TWIN=(
  [hip_one.dll]=libmulti.so
  [hip_two.dll]=libtwo.so
  [hip_app.exe]=app_pie
  [hip_cert.dll]=libtwo.so
  [hip_dbg.dll]=libtwo.so
)
PE_FILES=(hip_one.dll hip_two.dll hip_app.exe hip_cert.dll hip_dbg.dll)

# The inputs must be the committed, checked Linux assets.
for elf in libmulti.so libtwo.so app_pie; do
  [[ -f $BIN/$elf && -f $EXP/$elf/index.tsv ]] ||
    die "$BIN/$elf or its expected/ files missing; run build.sh first"
  line="$(grep -E "  $elf\$" "$EXP/binaries.sha256" || true)"
  [[ -n $line ]] || die "$elf not listed in expected/binaries.sha256"
  (cd "$BIN" && sha256sum --quiet -c - <<<"$line") ||
    die "bin/$elf does not match expected/binaries.sha256"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kpackfs-pe.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
OUT="$WORK/bin"
mkdir -p "$OUT" "$WORK/obj"
cd "$WORK/obj"

echo "== PE: cutting bundles out of the Linux fat binaries"
for elf in libmulti.so libtwo.so app_pie; do
  n="$(python3 "$TOOLS/pe_assets.py" split "$BIN/$elf" "$WORK/obj/$elf")"
  echo "$elf: $n bundle(s)"
done

echo "== PE: compiling ($("$CLANG" --version | sed -n 1p))"
CFLAGS=(--target=x86_64-pc-windows-msvc -O1 -ffreestanding -fno-stack-protector
        -Wall -Wextra -Werror -I "$SRC" -I "$WORK/obj")
# One object per bundle: hip_tu.c with that bundle's bytes (one "TU").
tu() { # tu OBJ TU_INDEX BLOB_INC [extra flags]
  local obj=$1 idx=$2 inc=$3; shift 3
  "$CLANG" "${CFLAGS[@]}" "$@" -DTU="$idx" "-DBLOB_INC=\"$inc\"" \
    -c "$SRC/hip_tu.c" -o "$obj"
}
tu multi_0.obj 0 libmulti.so.b0.inc
tu two_0.obj 0 libtwo.so.b0.inc
tu two_1.obj 1 libtwo.so.b1.inc
tu app_0.obj 0 app_pie.b0.inc -DHIP_TU_EXPORT=
"$CLANG" "${CFLAGS[@]}" -c "$SRC/dll_main.c" -o dll_main.obj
"$CLANG" "${CFLAGS[@]}" -c "$SRC/app_main.c" -o app_main.obj
"$CLANG" --target=x86_64-pc-windows-msvc -c "$SRC/dbg_tail.s" -o dbg_tail.obj
"$DLLTOOL" -m i386:x86-64 -d "$SRC/amdhip64.def" -l amdhip64.lib

echo "== PE: linking ($("$LLD_LINK" --version | sed -n 1p))"
# /Brepro: timestamp = hash of the image (deterministic; lld then also
# writes a REPRO debug-directory entry).  /merge:.CRT=.rdata is what the
# MSVC CRT asks for; without the CRT we say it ourselves.
LDFLAGS=(/nologo /nodefaultlib /dynamicbase /debug:none /Brepro /merge:.CRT=.rdata)
"$LLD_LINK" "${LDFLAGS[@]}" /dll /entry:_DllMainCRTStartup \
  /out:hip_one.dll dll_main.obj multi_0.obj amdhip64.lib
"$LLD_LINK" "${LDFLAGS[@]}" /dll /entry:_DllMainCRTStartup \
  /out:hip_two.dll dll_main.obj two_0.obj two_1.obj amdhip64.lib
"$LLD_LINK" "${LDFLAGS[@]}" /subsystem:console /entry:mainCRTStartup \
  /out:hip_app.exe app_main.obj app_0.obj amdhip64.lib
# hip_dbg.dll: hip_two.dll's objects linked with /debug, so it has a debug
# directory with a CodeView entry (a PDB path written as just the file name:
# /pdbaltpath:%_PDB%) besides the REPRO one.  In /lldmingw mode lld puts both
# into .buildid; merged into the discardable .dbgtail of dbg_tail.s they sit
# behind .hip_fat and .reloc, so their PointerToRawData must move when the
# transform drops .hip_fat's pages.  (Without this, lld puts them into .rdata,
# in front of .hip_fat.)  /Brepro with /debug derives the GUID and timestamp
# from the PDB, which holds the object paths: /pdbsourcepath fixes those (the
# work directory is random).  The .pdb is not kept.
"$LLD_LINK" /nologo /nodefaultlib /dynamicbase /debug /pdbaltpath:%_PDB% /Brepro \
  /pdbsourcepath:/kpackfs-pe \
  /merge:.CRT=.rdata /lldmingw \
  /merge:.buildid=.dbgtail /dll /entry:_DllMainCRTStartup \
  /out:hip_dbg.dll dll_main.obj two_0.obj two_1.obj dbg_tail.obj amdhip64.lib
for f in hip_one.dll hip_two.dll hip_app.exe hip_dbg.dll; do
  install -m 0755 "$f" "$OUT/$f"
done
# hip_two.dll + a fake Authenticode certificate table as a trailing overlay.
python3 "$TOOLS/pe_assets.py" cert "$OUT/hip_two.dll" "$OUT/hip_cert.dll"
chmod 0755 "$OUT/hip_cert.dll"

echo "== PE: extracting expected code objects"
XEXP="$WORK/expected"
for f in "${PE_FILES[@]}"; do
  printf '%-12s ' "$f"
  python3 "$TOOLS/extract_expected_pe.py" "$OUT/$f" "$XEXP/$f" "$WORK/x/$f"
done

# The PE files carry the Linux bundles unchanged: same code objects, same
# index.tsv, and .hip_fat is byte for byte the Linux .hip_fatbin (the blobs
# are laid out by the same rules: 4096-aligned, one NUL after each).
value() { awk -F'\t' -v k="$2" '$1 == k {print $2; f=1} END {exit !f}' "$1"; }
for f in "${PE_FILES[@]}"; do
  elf=${TWIN[$f]}
  cmp -s "$XEXP/$f/index.tsv" "$EXP/$elf/index.tsv" ||
    die "$f: index.tsv differs from expected/$elf/index.tsv"
  while IFS=$'\t' read -r _n _id _arch _size _sha rel; do
    cmp -s "$XEXP/$f/$rel" "$EXP/$elf/$rel" ||
      die "$f: $rel differs from expected/$elf/$rel"
  done < "$XEXP/$f/index.tsv"
  cmp -s "$WORK/x/$f/hip_fat.bin" "$WORK/obj/$elf.section.bin" ||
    die "$f: .hip_fat differs from $elf's .hip_fatbin"
  for k in bundles bundle_offset_0 bundle_size_0 bundle_offset_1 bundle_size_1; do
    a="$(value "$XEXP/$f/layout.tsv" "$k" || echo none)"
    b="$(value "$EXP/$elf/layout.tsv" "$k" || echo none)"
    [[ $a == "$b" ]] || die "$f: $k = $a, $elf has $b"
  done
  [[ "$(value "$XEXP/$f/layout.tsv" fat_section_virtual_size)" == \
     "$(value "$EXP/$elf/layout.tsv" fatbin_sh_size)" ]] ||
    die "$f: .hip_fat VirtualSize differs from $elf's .hip_fatbin size"
done
# hip_cert.dll: hip_two.dll plus the overlay, with the security directory
# pointing at it (a file offset at the old end of file) and a checksum.
[[ "$(value "$XEXP/hip_cert.dll/layout.tsv" security_dir_offset)" == \
   "$(stat -c %s "$OUT/hip_two.dll")" ]] || die "hip_cert.dll: certificate not at the old end of file"
[[ "$(value "$XEXP/hip_cert.dll/layout.tsv" overlay_size)" == \
   "$(value "$XEXP/hip_cert.dll/layout.tsv" security_dir_size)" ]] || die "hip_cert.dll: overlay is not exactly the certificate table"
cmp -s -n "$(stat -c %s "$OUT/hip_two.dll")" "$OUT/hip_two.dll" "$OUT/hip_cert.dll" &&
  die "hip_cert.dll: headers unchanged"
[[ "$(value "$XEXP/hip_app.exe/layout.tsv" pe_kind)" == exe ]] || die "hip_app.exe is not an EXE"
# hip_dbg.dll: its CodeView debug entry's data lies behind .hip_fat.
cv_ptr="$("$READOBJ" --coff-debug-directory "$OUT/hip_dbg.dll" |
  awk '/Type: CodeView/ {f=1} f && /PointerToRawData:/ {print $2; exit}')"
fat_end=$(( $(value "$XEXP/hip_dbg.dll/layout.tsv" fat_section_raw_offset) +
            $(value "$XEXP/hip_dbg.dll/layout.tsv" fat_section_raw_size) ))
[[ -n $cv_ptr ]] && (( cv_ptr >= fat_end )) ||
  die "hip_dbg.dll: no CodeView debug entry behind .hip_fat (${cv_ptr:-none} < $fat_end)"

echo "== PE: installing into $HERE"
for f in "${PE_FILES[@]}"; do
  rm -rf "${EXP:?}/$f"
  mv "$XEXP/$f" "$EXP/$f"
  install -m 0755 "$OUT/$f" "$BIN/$f"
done
# binaries.sha256 / toolchain.txt: replace this script's lines.
pe_re="  ($(IFS='|'; echo "${PE_FILES[*]}" | sed 's/\./\\./g'))\$"
{ grep -Ev "$pe_re" "$EXP/binaries.sha256" || true
  (cd "$BIN" && sha256sum "${PE_FILES[@]}"); } > "$WORK/sums"
cat "$WORK/sums" > "$EXP/binaries.sha256"
{ grep -v '^pe-' "$EXP/toolchain.txt" 2>/dev/null || true
  echo "pe-clang: $("$CLANG" --version | sed -n 1p)"
  echo "pe-lld-link: $("$LLD_LINK" --version | sed -n 1p)"
  echo "pe-llvm-readobj: $("$READOBJ" --version | awk '/version/ && !f {sub(/^ +/, ""); print; f=1}')"
  echo "pe-llvm-dlltool: $DLLTOOL (has no --version)"
} > "$WORK/tc"
cat "$WORK/tc" > "$EXP/toolchain.txt"
(cd "$BIN" && sha256sum --quiet -c ../expected/binaries.sha256) ||
  die "bin/ does not match expected/binaries.sha256"
(cd "$BIN" && ls -l "${PE_FILES[@]}")
echo "== PE: done"
