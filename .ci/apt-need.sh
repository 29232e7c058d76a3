#!/usr/bin/env bash
# Installs the Debian packages a script needs, if missing (as root), or
# says which to install. Usage: bash .ci/apt-need.sh CALLER PACKAGE...
set -euo pipefail
caller=$1; shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "$caller: please install (as root): apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "$caller: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
