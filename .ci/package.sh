#!/usr/bin/env bash
# CI: the Debian package as a user gets it. Builds it (fs-linux/package.sh),
# installs it with dpkg -i, checks the installed files (man pages, completions,
# the systemd example), runs the README's demo with the kpackfs on the PATH,
# mounts through mount(8) -t fuse.kpackfs, then removes the package again.
# Run as root (CI is). About 1 minute with a warm target/, plus a few minutes
# the first time to compile cargo-deb.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "package: $*"; }
# dpkg-dev: dpkg-shlibdeps for the Depends line; binutils: objcopy (dbgsym);
# man-db: man -w; python3-venv: the Kubernetes schema check.
bash .ci/apt-need.sh .ci/package.sh dpkg-dev binutils man-db fuse3 libzstd-dev pkg-config python3-venv
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -qF "$CARGO_DEB_VERSION"; then
  say "installing cargo-deb $CARGO_DEB_VERSION"
  cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked -q
fi

# A developer's installed kpackfs package is replaced, then removed at the end.
if dpkg-query -W -f='${Status}' kpackfs 2>/dev/null | grep -q "install ok installed"; then
  say "kpackfs is already installed as a package; it is replaced and removed at the end"
fi
deb=$(bash fs-linux/package.sh | grep '/kpackfs_.*\.deb$' | tail -1)
[ -f "$deb" ] || { echo "package: no .deb built" >&2; exit 1; }
say "built $deb ($(stat -c %s "$deb") bytes)"
dpkg-deb -f "$deb" Package Version Depends

mnt=$(mktemp -d)
helper_mnt=$(mktemp -d)
cache_existed=$([ -e /var/cache/kpackfs ] && echo yes || echo no)
cleanup() {
  mountpoint -q "$mnt" && umount "$mnt"
  mountpoint -q "$helper_mnt" && umount "$helper_mnt"
  rmdir "$mnt" "$helper_mnt" 2>/dev/null || true
  dpkg -r kpackfs >/dev/null 2>&1 || true
  [ "$cache_existed" = yes ] || rm -rf /var/cache/kpackfs
}
trap cleanup EXIT

dpkg -i "$deb"
[ "$(command -v kpackfs)" = /usr/bin/kpackfs ] || { echo "package: kpackfs on the PATH is $(command -v kpackfs), not /usr/bin/kpackfs" >&2; exit 1; }
kpackfs --version
for page in kpackfs kpackfs-mount kpackfs-bake kpackfs-archs kpackfs-resolve kpackfs-inspect; do
  man -w "$page" >/dev/null
done
page=$(man kpackfs-mount 2>/dev/null)
grep -q 'fuse.kpackfs' <<<"$page" || { echo "package: man kpackfs-mount lacks the mount helper section" >&2; exit 1; }
for f in /usr/share/bash-completion/completions/kpackfs /usr/share/zsh/vendor-completions/_kpackfs \
  /usr/share/fish/vendor_completions.d/kpackfs.fish /usr/share/doc/kpackfs/examples/opt-kpackfs-gfx90a.mount \
  /usr/share/doc/kpackfs/examples/kpackfs-daemonset.yaml /usr/share/doc/kpackfs/containers.md; do
  [ -s "$f" ] || { echo "package: $f missing or empty" >&2; exit 1; }
done
# The bash completion completes (without the bash-completion package).
got=$(bash -c 'source /usr/share/bash-completion/completions/kpackfs; COMP_WORDS=(kpackfs mount --allow); COMP_CWORD=2; _kpackfs kpackfs --allow mount; echo "${COMPREPLY[*]}"')
[ "$got" = --allow-other ] || { echo "package: bash completion of 'kpackfs mount --allow' gave '$got'" >&2; exit 1; }
# The example unit parses (it names man:kpackfs-mount(1), so this also finds the page).
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /usr/share/doc/kpackfs/examples/opt-kpackfs-gfx90a.mount
fi
# The DaemonSet example against the Kubernetes API schema (strict: a
# misspelt field fails), for an older and the current release. The tool is
# kept in target/ between runs.
# A venv's scripts name its absolute path: it lives where target/ really
# is (CI's clone links target/ to the checkout's), and is rebuilt when it
# no longer runs (made under another path, or its Python is gone).
venv=$(realpath -m target)/ci-kubernetes-validate
if ! "$venv/bin/kubernetes-validate" --help >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0
fi
for v in 1.28.0 1.37.0; do
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" /usr/share/doc/kpackfs/examples/kpackfs-daemonset.yaml
done
say "installed files OK"

# The README's demo, run with the kpackfs on the PATH (embedded demo install).
KPACKFS=kpackfs bash test_assets/demo.sh "$mnt" gfx90a:xnack-
mountpoint -q "$mnt"
[ -s "$mnt/lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack" ]
kpackfs resolve "$mnt/lib/libdemo.so" --arch gfx90a:sramecc+:xnack- >/dev/null
umount "$mnt"
if mountpoint -q "$mnt"; then echo "package: $mnt still mounted" >&2; exit 1; fi
say "demo from the PATH OK"

# mount(8) -> mount.fuse3 -> kpackfs from the PATH, as fstab and systemd do.
mount -t fuse.kpackfs "$PWD/test_assets/demo-install" "$helper_mnt" -o arch=gfx1030,allow_other,nofail
[ -s "$helper_mnt/lib/.kpack/libdemo.so.1.0_gfx1030.kpack" ]
umount "$helper_mnt"
say "mount -t fuse.kpackfs OK"

dpkg -r kpackfs
hash -r
! command -v kpackfs >/dev/null || { echo "package: kpackfs still on the PATH after dpkg -r" >&2; exit 1; }
say "OK"
