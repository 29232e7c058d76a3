#!/usr/bin/env bash
# The Windows check of kpackfs, run from Linux (Debian 12, as root in CI):
#   1. installs mingw-w64 and wine (apt) and the x86_64-pc-windows-gnu Rust
#      target (rustup) if missing;
#   2. makes a wine prefix under target/ with the bcryptprimitives.dll stub
#      Rust's std needs on Debian's wine 8;
#   3. compile-checks kpackfs-core and kpackfs-windows (the Dokan adapter,
#      and the kpackfs.exe binary) for Windows, with the C compiler wrapper
#      that lets dokan-sys's build script run its generator under wine;
#   4. runs the core's tests (unit and integration) and the adapter's tests
#      as Windows programs under wine;
#   5. smoke-tests kpackfs.exe under wine: archs, bake, resolve, and a mount
#      that must fail cleanly (wine has no Dokan driver).
# Mounting itself needs the Dokan kernel driver: only real Windows can test it.
# Helpers: fs-windows/cross/ (the compiler wrapper and the DLL stub; another
# directory with the same two files can be given in KPACKFS_WINDOWS_CROSS).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cross=$(cd "${KPACKFS_WINDOWS_CROSS:-$repo/fs-windows/cross}" && pwd)
target=x86_64-pc-windows-gnu
start=$(date +%s)
step() { echo "== fs-windows/check.sh: $* [$(($(date +%s) - start))s]"; }

step "prerequisites"
bash .ci/apt-need.sh fs-windows/check.sh gcc-mingw-w64-x86-64 wine wine64
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

step "wine prefix"
export WINEPREFIX=$repo/target/wineprefix WINEDEBUG=-all
# No Mono/Gecko installer prompts in a headless prefix.
export WINEDLLOVERRIDES="mscoree,mshtml="
stub=$repo/target/windows-cross/bcryptprimitives.dll
if [ ! -f "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ] || [ "$cross/bcryptprimitives.c" -nt "$stub" ]; then
  mkdir -p "$(dirname "$stub")"
  x86_64-w64-mingw32-gcc -shared -O2 -o "$stub" "$cross/bcryptprimitives.c" -lbcrypt
  wineboot -i >/dev/null 2>&1 || true
  cp "$stub" "$WINEPREFIX/drive_c/windows/system32/"
fi

export CC_x86_64_pc_windows_gnu=$cross/mingw-cc-wine.sh
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

step "cargo check for $target"
cargo check --locked --target "$target" -p kpackfs-core -p kpackfs-windows --all-targets
cargo check --locked --target "$target" -p kpackfs-windows --features exe --bins

step "tests under wine"
cargo test --locked --target "$target" -p kpackfs-core -p kpackfs-windows --no-run
# The adapter links dokan2.dll, which dokan-sys builds from source (the
# user-mode library only: no driver). Let wine find it.
dll=$(ls -t $(find "$repo/target/$target/debug/build" -name dokan2.dll) | head -n 1)
export WINEPATH="Z:$(dirname "$dll")"
cargo test --locked --target "$target" -p kpackfs-core -p kpackfs-windows

step "kpackfs.exe under wine"
cargo build --locked --target "$target" -p kpackfs-windows --features exe
exe=$repo/target/$target/debug/kpackfs.exe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wine "$exe" --version
wine "$exe" archs test_assets/demo-install
wine "$exe" bake test_assets/demo-install "$tmp/baked" --arch gfx90a:xnack- -q
ls "$tmp/baked/lib/.kpack/libdemo.so.1.0_gfx90a.kpack" >/dev/null
if find "$tmp/baked" -name '*:*' | grep -q .; then
  echo "fs-windows/check.sh: a baked name contains ':'" >&2
  exit 1
fi
wine "$exe" resolve "$tmp/baked/lib/libdemo.so.1.0" --arch gfx90a:sramecc+:xnack-
# The loader's view of a baked ELF library and a baked PE DLL equals
# clang-offload-bundler's code objects (test_assets/expected).
wine "$exe" bake test_assets/bin "$tmp/bin" --arch gfx1030 -q
for b in libtwo.so hip_two.dll; do
  wine "$exe" resolve "$tmp/bin/$b" --arch gfx1030 --out "$tmp/co-$b" >/dev/null
  for i in 0 1; do
    cmp "$tmp/co-$b/$i.co" "test_assets/expected/$b/$i/gfx1030.co"
  done
done
set +e
out=$(wine "$exe" mount test_assets/demo-install K: --arch gfx90a 2>&1)
rc=$?
set -e
echo "$out"
if [ $rc -ne 1 ] || ! grep -q "Dokan" <<<"$out"; then
  echo "fs-windows/check.sh: mount without a Dokan driver should fail cleanly with exit 1 (got $rc)" >&2
  exit 1
fi
wineserver -w || true

step "passed"
echo "fs-windows/check.sh: Windows check passed in $(($(date +%s) - start))s"
