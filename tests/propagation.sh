#!/usr/bin/env bash
# The mount propagation that docs/containers.md relies on, acted out with
# mount namespaces instead of a container engine (none runs here):
#
#   node       a directory on a shared mount (kubelet's hostPath for the view;
#              systemd makes / shared)
#   daemon     a namespace whose copy of it is rshared (Bidirectional), where
#              `kpackfs mount -f` serves the view in a subdirectory
#   consumers  namespaces whose copies are rslave (HostToContainer) and
#              read-only; "parent" binds the hostPath directory, "mnt" and
#              "late" bind the mountpoint directory itself, "late" only
#              after the view is mounted (how `docker run -v` of a live view
#              behaves)
#
# It checks: the view reaches the node and the consumers started before it;
# it is read-only there; SIGTERM to the daemon (pod deletion) unmounts it
# everywhere; a second daemon (pod restart, another target) reaches
# "parent" and "mnt" again, while "late" is left with the dead connection
# ("Transport endpoint is not connected") — why the guide has consumers
# mount the parent directory.
#
# Usage (root): unshare -m --propagation private bash tests/propagation.sh KPACKFS WORKDIR
# The outer private namespace keeps every mount away from the machine's.
set -euo pipefail
K=$1
W=$2
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
fail() { echo "propagation: FAIL: $*" >&2; exit 1; }
ok() { echo "propagation: ok: $*"; }
cd "$W"
mkdir -p node/kpackfs daemon app-parent app-mnt app-late
mount --bind node/kpackfs node/kpackfs
mount --make-shared node/kpackfs
mkdir node/kpackfs/rocm

own=$(readlink /proc/self/ns/mnt)
# new_ns VAR PROPAGATION: VAR = a process (a child of this shell, so the
# EXIT trap ends it) in a new mount namespace whose mounts are
# PROPAGATION copies of ours.
new_ns() {
  unshare -m --propagation "$2" sleep 600 >/dev/null 2>&1 &
  local p=$!
  while [ "$(readlink /proc/$p/ns/mnt)" = "$own" ]; do sleep 0.01; done
  printf -v "$1" %s "$p"
}
ns() { local p=$1; shift; nsenter -t "$p" -m "$@"; }
kpack_names() { ns "$1" ls "$2/lib/.kpack" 2>&1 | tr '\n' ' '; }
wait_view() {
  for _ in $(seq 400); do [ -e node/kpackfs/rocm/lib/.kpack ] && return 0; sleep 0.05; done
  fail "the view never reached the node (daemon log: $(cat daemon.log))"
}
daemon() { # ARCH: kp = `kpackfs mount -f` in a new namespace with the hostPath rshared
  local d
  new_ns d unchanged
  ns "$d" mount --rbind "$W/node/kpackfs" "$W/daemon"
  ns "$d" mount --make-rshared "$W/daemon"
  nsenter -t "$d" -m "$K" mount "$W/daemon/rocm" --arch "$1" -f --allow-other --cache-dir none >>daemon.log 2>&1 &
  kp=$!
}

new_ns parent slave
ns "$parent" mount --rbind -o ro "$W/node/kpackfs" "$W/app-parent"
new_ns mnt slave
ns "$mnt" mount --rbind -o ro "$W/node/kpackfs/rocm" "$W/app-mnt"

daemon gfx90a
wait_view
want="libdemo.so.1.0_gfx90a:xnack+.kpack libdemo.so.1.0_gfx90a:xnack-.kpack libdemo2.so_gfx90a.kpack "
[ "$(ls node/kpackfs/rocm/lib/.kpack | tr '\n' ' ')" = "$want" ] || fail "node sees $(ls node/kpackfs/rocm/lib/.kpack)"
ok "the daemon's mount (rshared) reached the node"
[ "$(kpack_names "$parent" "$W/app-parent/rocm")" = "$want" ] || fail "parent consumer sees $(kpack_names "$parent" "$W/app-parent/rocm")"
[ "$(kpack_names "$mnt" "$W/app-mnt")" = "$want" ] || fail "mountpoint consumer sees $(kpack_names "$mnt" "$W/app-mnt")"
ok "consumers started before the mount (rslave) see it, through the parent directory and the mountpoint"
new_ns late slave
ns "$late" mount --rbind -o ro "$W/node/kpackfs/rocm" "$W/app-late"
[ "$(kpack_names "$late" "$W/app-late")" = "$want" ] || fail "late consumer sees $(kpack_names "$late" "$W/app-late")"
ok "a consumer started after the mount sees it"
a=$(sha256sum <node/kpackfs/rocm/lib/libdemo.so.1.0)
b=$(ns "$parent" sh -c "sha256sum <'$W/app-parent/rocm/lib/libdemo.so.1.0'")
[ "$a" = "$b" ] || fail "the consumer reads other bytes than the node"
if ns "$parent" touch "$W/app-parent/rocm/x" 2>/dev/null; then fail "the consumer could write"; fi
ok "consumers read the node's bytes and cannot write"

kill -TERM "$kp"
wait "$kp" || fail "the daemon exited with $? on SIGTERM"
if mountpoint -q node/kpackfs/rocm; then fail "the node still has the view after SIGTERM"; fi
if ns "$parent" mountpoint -q "$W/app-parent/rocm"; then fail "the parent consumer still has the view"; fi
[ -z "$(ns "$mnt" ls -A "$W/app-mnt")" ] || fail "the mountpoint consumer still sees files"
ok "SIGTERM to the daemon unmounted the view on the node and in the consumers"

daemon gfx1030
wait_view
want="libdemo.so.1.0_gfx1030.kpack libdemo2.so_gfx1030.kpack "
[ "$(kpack_names "$parent" "$W/app-parent/rocm")" = "$want" ] || fail "after a restart the parent consumer sees $(kpack_names "$parent" "$W/app-parent/rocm")"
[ "$(kpack_names "$mnt" "$W/app-mnt")" = "$want" ] || fail "after a restart the mountpoint consumer sees $(kpack_names "$mnt" "$W/app-mnt")"
ok "a restarted daemon reaches the running consumers"
case "$(kpack_names "$late" "$W/app-late")" in
  *"not connected"*) ok "the consumer that bound the live mountpoint keeps the dead connection (as documented)" ;;
  *) fail "late consumer: expected a dead connection, saw $(kpack_names "$late" "$W/app-late")" ;;
esac
kill -TERM "$kp"
wait "$kp" || fail "the second daemon exited with $? on SIGTERM"
echo "propagation: all checks passed"
