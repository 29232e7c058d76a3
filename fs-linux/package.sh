#!/usr/bin/env bash
# Builds the Debian package target/debian/kpackfs_<version>-1_<arch>.deb and
# prints its path on the last line. Usage: bash fs-linux/package.sh [cargo-deb options]
#
# The man pages and completion scripts are rendered by the release binary
# itself (`kpackfs generate`) into target/release/kpackfs-gen/, then
# `cargo deb --no-build` packs that binary with them (assets:
# [package.metadata.deb] in fs-linux/Cargo.toml), so the pages describe
# exactly the binary in the package.
#
# Needs cargo-deb (`cargo install cargo-deb --version 3.8.0 --locked`),
# libzstd-dev and pkg-config to build, dpkg-dev for the Depends line
# (dpkg-shlibdeps).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo deb --version >/dev/null 2>&1; then
  echo "fs-linux/package.sh: needs cargo-deb: cargo install cargo-deb --version 3.8.0 --locked" >&2
  exit 1
fi
cargo build --release --locked -p kpackfs
target=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
k=$target/release/kpackfs
gen=$target/release/kpackfs-gen
rm -rf "$gen"
mkdir -p "$gen/completions"
"$k" generate man "$gen/man"
# cargo-deb compresses man pages only outside the target directory.
gzip -9n "$gen"/man/*.1
"$k" generate completions bash >"$gen/completions/kpackfs.bash"
"$k" generate completions zsh >"$gen/completions/_kpackfs"
"$k" generate completions fish >"$gen/completions/kpackfs.fish"
cargo deb -p kpackfs --no-build "$@"
