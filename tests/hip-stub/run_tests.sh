#!/bin/bash
# Build the HIP stub and run its end-to-end checks.
#
#   tests/hip-stub/run_tests.sh [WORKDIR]        (default WORKDIR: mktemp -d)
#
# Needs: cc, libzstd-dev (zlib1g-dev for the self-test's zlib CCOB case),
# objcopy, python3.  Optional: hipcc + /usr/lib/llvm-15/bin/clang-offload-bundler
# (HIPF checks on freshly built binaries), Debian's librocsparse/librocrand
# (dlopen checks).  Set FULL=1 to also register all 111 bundles of
# librocsparse through the HIPF path (reads ~100 MB of its 1.3 GB section).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# The compatibility vectors of this checkout (override with VEC=DIR).
VEC=${VEC:-$(cd "$HERE/../../test_assets/vectors" && pwd)}
GOLD=$VEC/generated-golden
# A workdir of its own is removed after a clean run and kept (and named)
# after a failure; one given as $1 is the caller's and always kept.
if [ $# -ge 1 ]; then W=$1; OWN=0; else W=$(mktemp -d "${TMPDIR:-/tmp}/hipstub-test.XXXXXX"); OWN=1; fi
mkdir -p "$W" "$W/tmp"
# hipcc (clang) leaves an empty temporary directory per compile behind in
# $TMPDIR: keep them inside the workdir.
export TMPDIR="$W/tmp"
BUNDLER=${BUNDLER:-/usr/lib/llvm-15/bin/clang-offload-bundler}
CFLAGS="-Wall -Wextra -Werror -O2"
pass=0 fail=0
ok()   { pass=$((pass+1)); }
bad()  { fail=$((fail+1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

echo "== build ($W)"
cc $CFLAGS -shared -fPIC -DHAVE_ZSTD -o "$W/libamdhip64.so.5" "$HERE/hipstub.c" \
   -Wl,--version-script="$HERE/hipstub.map" -Wl,-soname,libamdhip64.so.5 \
   -Wl,--no-undefined -lzstd || exit 1
cc $CFLAGS -o "$W/dlopen_driver" "$HERE/dlopen_driver.c" -ldl || exit 1
cc $CFLAGS -g -DHAVE_ZSTD -DHAVE_ZLIB -o "$W/stubtest" "$HERE/stubtest.c" -lzstd -lz -pthread || exit 1
STUB=$W
run() { LD_LIBRARY_PATH=$STUB "$@"; }

echo "== symbols"
check 'python3 "$HERE/gen_syms.py" --check-stub "$W/libamdhip64.so.5" >/dev/null' "stub exports != table"
deps=$(objdump -p "$W/libamdhip64.so.5" | awk '/NEEDED/{print $2}' | sort | tr '\n' ' ')
# ld-linux appears because of __tls_get_addr (thread-local launch-config stack)
check '[ "$deps" = "ld-linux-x86-64.so.2 libc.so.6 libzstd.so.1 " ]' "unexpected NEEDED: $deps"

echo "== unit self-test"
check '"$W/stubtest" "$VEC"' "stubtest"

echo "== dlopen of Debian's real HIP libraries through the stub"
for lib in /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1 /usr/lib/x86_64-linux-gnu/librocrand.so.1.1; do
    [ -e "$lib" ] || { echo "skip $lib"; continue; }
    check 'python3 "$HERE/gen_syms.py" --check "$lib" >/dev/null' "imports of $lib"
    check 'run "$W/dlopen_driver" "$lib"' "dlopen $lib"
    check '[ "$(run env LD_DEBUG=libs "$W/dlopen_driver" "$lib" 2>&1 | grep -c "calling init: $W/libamdhip64.so.5")" = 1 ]' \
        "$lib did not bind to the stub"
done
if [ "${FULL:-0}" = 1 ]; then
    rm -rf "$W/rs"; mkdir "$W/rs"
    run env KPACK_STUB_OUT="$W/rs" KPACK_STUB_ARCH=gfx90a:sramecc+:xnack- \
        "$W/dlopen_driver" /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1
    n=$(grep -c "	OK$" "$W/rs/log.tsv"); t=$(wc -l < "$W/rs/log.tsv")
    echo "librocsparse HIPF: $n/$t OK"
    check '[ "$n" = "$t" ] && [ "$t" -gt 0 ]' "librocsparse HIPF registrations"
fi

# expected code objects: split .hip_fatbin into bundles, unbundle with clang
extract() { # binary target index out
    local d="$W/ex.$$"; mkdir -p "$d"
    objcopy -O binary --only-section=.hip_fatbin "$1" "$d/fb" || return 1
    python3 - "$d/fb" "$3" "$d/b" <<'EOF' || return 1
import sys
d = open(sys.argv[1], 'rb').read()
m = b'__CLANG_OFFLOAD_BUNDLE__'
starts = [o for o in range(0, len(d), 4096) if d[o:o+24] == m]
i = int(sys.argv[2]); s = starts[i]
e = starts[i+1] if i + 1 < len(starts) else len(d)
open(sys.argv[3], 'wb').write(d[s:e])
EOF
    "$BUNDLER" --unbundle --type=o --targets="hipv4-amdgcn-amd-amdhsa--$2" \
        --input="$d/b" --output="$4" || return 1
    rm -rf "$d"
}

co_is() { # outdir seq expected-file
    cmp -s "$1/$2.co" "$3"
}

field() { # outdir seq column
    awk -F'\t' -v s="$2" -v c="$3" '$1==s{print $c}' "$1/log.tsv"
}

fresh() { rm -rf "$1"; mkdir -p "$1"; }

SRC=$GOLD/src
if command -v hipcc >/dev/null && [ -x "$BUNDLER" ]; then
    echo "== HIPF: freshly built hipcc binaries"
    B=$W/hipcc; mkdir -p "$B"
    (cd "$B" && hipcc -fPIC -shared --offload-arch=gfx90a --offload-arch=gfx1030 \
         "$SRC/k.hip" "$SRC/k2.hip" -o libk2.so &&
     hipcc --offload-arch=gfx90a:xnack- --offload-arch=gfx1030 \
         "$SRC/k.hip" "$SRC/main.cpp" -o app) >/dev/null 2>&1 || bad "hipcc build"
    for t in gfx1030 gfx90a; do
        for i in 0 1; do extract "$B/libk2.so" $t $i "$B/libk2.$t.$i.co" || bad "extract $t $i"; done
    done
    for t in gfx1030 gfx90a:xnack-; do extract "$B/app" $t 0 "$B/app.$t.co" || bad "extract app $t"; done
    for t in gfx1030 gfx90a; do
        O=$W/fat-lib-$t; fresh "$O"
        check 'run env KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=$t "$W/dlopen_driver" "$B/libk2.so"' "dlopen libk2 $t"
        for i in 0 1; do
            check 'co_is "$O" $i "$B/libk2.$t.$i.co"' "HIPF libk2 $t #$i"
            check '[ "$(field "$O" $i 2)$(field "$O" $i 3)$(field "$O" $i 7)$(field "$O" $i 9)" = "HIPF$B/libk2.so${t}OK" ]' "HIPF libk2 $t #$i log"
        done
    done
    for pair in gfx1030:gfx1030 gfx90a:sramecc+:xnack-:gfx90a:xnack- gfx90a:xnack-:gfx90a:xnack-; do
        dev=${pair%:gfx*}; want=gfx${pair##*:gfx}
        O=$W/fat-app; fresh "$O"
        check 'run env KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=$dev "$B/app"' "app exit code ($dev)"
        check 'co_is "$O" 0 "$B/app.$want.co"' "HIPF app $dev -> $want"
        check '[ "$(field "$O" 0 7)" = "$want" ]' "HIPF app $dev arch column"
    done
    O=$W/fat-app; fresh "$O"
    run env KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx90a "$B/app"
    check '[ "$(field "$O" 0 9)" = NO_BINARY_FOR_GPU ]' "app on bare gfx90a has no compatible entry"
    check 'run "$B/app"' "app without KPACK_STUB_OUT"
else
    echo "skip HIPF hipcc checks (no hipcc or bundler)"
fi

if [ -x "$BUNDLER" ]; then
    echo "== HIPK: reference split of libk2.so / app_pie"
    K=$GOLD/kpack
    X=$W/x; rm -rf "$X"; mkdir -p "$X/stage/lib" "$X/stage/bin" "$X/stage/.kpack"
    cp "$K/split_libk2.so" "$X/stage/lib/libk2.so"
    cp "$K/split_app_pie" "$X/stage/bin/app_pie"
    chmod u+w "$X/stage/lib/libk2.so" "$X/stage/bin/app_pie"
    cp "$K/test_lib_gfx1030.kpack" "$K/test_lib_gfx90a.kpack" "$X/stage/.kpack/"
    E=$W/expected; mkdir -p "$E"
    for t in gfx1030 gfx90a; do
        for i in 0 1; do extract "$GOLD/elf/libk2.so" $t $i "$E/libk2.$t.$i.co" || bad "extract"; done
    done
    for t in gfx1030 gfx90a:xnack- gfx90a:xnack+; do extract "$GOLD/elf/app_pie" $t 0 "$E/app.$t.co" || bad "extract"; done
    for mode in feb2026 newest newest-strict; do
        for dev in gfx1030 gfx90a amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-; do
            t=$( [ $dev = gfx1030 ] && echo gfx1030 || echo gfx90a )
            O=$W/k-$mode; fresh "$O"
            check 'run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=$dev "$W/dlopen_driver" "$X/stage/lib/libk2.so"' "dlopen split libk2"
            for i in 0 1; do
                check 'co_is "$O" $i "$E/libk2.$t.$i.co"' "HIPK $mode $dev #$i"
                got=$(awk -F'\t' -v s=$i '$1==s{print $2"|"$3"|"$4"|"$5"|"$6"|"$7"|"$9}' "$O/log.tsv")
                want="HIPK|$X/stage/lib/libk2.so|$i|$X/stage/.kpack/test_lib_$t.kpack|stage/lib/libk2.so#$i|$t|OK"
                check '[ "$got" = "$want" ]' "HIPK log $mode $dev #$i: $got"
            done
        done
        # error paths
        O=$W/k-err; fresh "$O"
        run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx1100 "$W/dlopen_driver" "$X/stage/lib/libk2.so"
        check '[ "$(field "$O" 0 9)$(field "$O" 1 9)" = ARCHIVE_NOT_FOUNDARCHIVE_NOT_FOUND ]' "missing archive ($mode)"
        cp "$X/stage/.kpack/test_lib_gfx90a.kpack" "$X/stage/.kpack/test_lib_gfx1100.kpack"
        fresh "$O"
        run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx1100 "$W/dlopen_driver" "$X/stage/lib/libk2.so"
        check '[ "$(field "$O" 0 9)" = ARCH_NOT_FOUND ]' "arch not present ($mode)"
        rm "$X/stage/.kpack/test_lib_gfx1100.kpack"
        # generic second ISA: native archive missing, generic present
        cp "$X/stage/.kpack/test_lib_gfx1030.kpack" "$X/stage/.kpack/test_lib_gfx10-3-generic.kpack"
        fresh "$O"
        run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx1036 KPACK_STUB_ARCH2=gfx10-3-generic \
            "$W/dlopen_driver" "$X/stage/lib/libk2.so"
        check '[ "$(field "$O" 0 9)" = ARCH_NOT_FOUND ]' "generic archive lists only gfx1030 ($mode)"
        rm "$X/stage/.kpack/test_lib_gfx10-3-generic.kpack"
    done

    # app_pie: xnack archives (real names contain ':'); B9 with libk2 on an xnack- device
    cp "$K/test_lib_gfx90a_xnack-.kpack" "$X/stage/.kpack/test_lib_gfx90a:xnack-.kpack"
    cp "$K/test_lib_gfx90a_xnack+.kpack" "$X/stage/.kpack/test_lib_gfx90a:xnack+.kpack"
    for mode in feb2026 newest; do
        for pair in "gfx90a:sramecc+:xnack-|gfx90a:xnack-" "gfx90a:xnack+|gfx90a:xnack+" "gfx1030|gfx1030"; do
            dev=${pair%|*}; want=${pair#*|}
            O=$W/pie; fresh "$O"
            check 'run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=$dev "$X/stage/bin/app_pie"' "app_pie runs ($mode $dev)"
            check 'co_is "$O" 0 "$E/app.$want.co"' "HIPK app_pie $mode $dev"
            check '[ "$(field "$O" 0 6)|$(field "$O" 0 7)" = "stage/bin/app_pie#0|$want" ]' "app_pie log $mode $dev"
        done
        O=$W/pie; fresh "$O"
        run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx90a "$X/stage/bin/app_pie"
        # test_lib_gfx90a.kpack lists gfx90a (for libk2) but has no app_pie#0 under it
        check '[ "$(field "$O" 0 9)|$(field "$O" 0 7)" = "KERNEL_NOT_FOUND|gfx90a" ]' "app_pie on bare gfx90a ($mode)"
        O=$W/b9; fresh "$O"
        run env KPACK_STUB_LOADER=$mode KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx90a:xnack- "$W/dlopen_driver" "$X/stage/lib/libk2.so"
        if [ $mode = feb2026 ]; then
            check '[ "$(field "$O" 0 9)|$(field "$O" 0 5)" = "KERNEL_NOT_FOUND|$X/stage/.kpack/test_lib_gfx90a:xnack-.kpack" ]' "B9 with feb2026 loader"
        else
            check '[ "$(field "$O" 0 9)|$(field "$O" 0 7)" = "OK|gfx90a" ] && co_is "$O" 0 "$E/libk2.gfx90a.0.co"' "fall-through with newest loader"
        fi
    done
    # KPACK_STUB_OUT unset: nothing written, still loads
    check 'run env KPACK_STUB_ARCH=gfx1030 "$W/dlopen_driver" "$X/stage/lib/libk2.so"' "HIPK without output dir"
    # golden libk2.so.kpacked (search path ../.kpack/test_@GFXARCH@.kpack, kernel_name lib/libk2.so)
    Y=$W/y; rm -rf "$Y"; mkdir -p "$Y/lib" "$Y/.kpack"; cp "$GOLD/elf/libk2.so.kpacked" "$Y/lib/libk2.so"
    O=$W/k-y; fresh "$O"
    run env KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx1030 "$W/dlopen_driver" "$Y/lib/libk2.so"
    check '[ "$(field "$O" 0 2)|$(field "$O" 0 4)|$(field "$O" 0 6)|$(field "$O" 0 9)" = "HIPK|0|lib/libk2.so#0|ARCHIVE_NOT_FOUND" ]' "libk2.so.kpacked marker / missing archive"
    check '[ "$(field "$O" 1 4)|$(field "$O" 1 6)" = "1|lib/libk2.so#1" ]' "libk2.so.kpacked wrapper 1 index"
    # app_nopie.kpacked: upstream bug B1 (pointer 0) must not crash the process
    cp "$GOLD/elf/app_nopie.kpacked" "$Y/lib/app_nopie"; chmod +x "$Y/lib/app_nopie"
    O=$W/k-np; fresh "$O"
    check 'run env KPACK_STUB_OUT="$O" KPACK_STUB_ARCH=gfx90a "$Y/lib/app_nopie"' "app_nopie.kpacked runs"
    check '[ "$(field "$O" 0 2)|$(field "$O" 0 9)" = "HIPK|PATH_DISCOVERY_FAILED" ]' "app_nopie.kpacked null pointer"
else
    echo "skip HIPK checks (no bundler)"
fi

if [ $fail = 0 ] && [ $OWN = 1 ]; then
    rm -rf "$W"
    echo "== $pass passed, $fail failed"
else
    echo "== $pass passed, $fail failed (workdir $W)"
fi
[ $fail = 0 ]
