#!/usr/bin/env bash
# C compiler for cross-building the Windows crates from Linux: stands in for
# x86_64-w64-mingw32-gcc (set CC_x86_64_pc_windows_gnu to this file).
#
# Why: dokan-sys's build script compiles a small C program into an .exe and
# then executes it on the build machine to learn the bundled Dokan version.
# On Linux that exec fails ("Exec format error"). So when a call links a
# Windows executable, we build it under another name and put, at the path
# the caller asked for, a shell launcher that runs it with wine. Everything
# else (objects, DLLs, probes) goes to the compiler unchanged.
#
# KPACKFS_MINGW_CC overrides the compiler (default x86_64-w64-mingw32-gcc).
set -euo pipefail
compiler=${KPACKFS_MINGW_CC:-x86_64-w64-mingw32-gcc}

# Find the output path (-oPATH or -o PATH) and whether this call links.
out=
links=1
expect_out=0
for a in "$@"; do
  if [ "$expect_out" = 1 ]; then out=$a; expect_out=0; continue; fi
  case $a in
    -o) expect_out=1 ;;
    -o*) out=${a#-o} ;;
    -c | -S | -E | -shared | -M | -MM) links=0 ;;
  esac
done

case $out in
  *.exe | *.EXE) ;;
  *) exec "$compiler" "$@" ;;
esac
[ "$links" = 1 ] || exec "$compiler" "$@"

# Link the real program beside the requested path, then write the launcher.
real=${out%.*}.win64.exe
args=()
expect_out=0
for a in "$@"; do
  if [ "$expect_out" = 1 ]; then args+=("$real"); expect_out=0; continue; fi
  case $a in
    -o) args+=("$a"); expect_out=1 ;;
    -o*) args+=("-o$real") ;;
    *) args+=("$a") ;;
  esac
done
"$compiler" "${args[@]}"
# Single-quote the path for sh (an embedded ' becomes '\'').
quoted="'${real//\'/\'\\\'\'}'"
printf '#!/bin/sh\n# Runs the Windows program built by %s under wine.\nexec wine %s "$@"\n' \
  "$(basename "$0")" "$quoted" > "$out"
chmod 0755 "$out"
