#!/usr/bin/env bash
# The mount propagation that docs/containers.md relies on, acted out with
# namespaces instead of a container engine (none runs here):
#
#   node       a directory on a shared mount (kubelet's hostPath for the view;
#              systemd makes / shared)
#   kpackfs    a "container": new PID and mount namespaces, its copy of the
#              hostPath made rshared (Bidirectional), running the DaemonSet's
#              start command (docs/examples/kpackfs-daemonset.yaml) with a
#              real `kpackfs mount -f`
#   workloads  mount namespaces whose copies are rslave (HostToContainer) and
#              read-only; "parent" binds the hostPath directory, "mnt" and
#              "late" the mountpoint directory itself, "late" only after the
#              view is mounted (how `docker run -v` of a live view behaves)
#
# It checks: the view reaches the node and the workloads started before it;
# it is read-only there; SIGTERM to kpackfs (pod deletion) unmounts it
# everywhere; a restarted container (another target) reaches "parent" and
# "mnt" again, while "late" keeps the dead connection ("Transport endpoint
# is not connected") — why the guide has workloads mount the parent
# directory; a container killed outright (SIGKILL of its PID 1, every
# process with it) leaves a dead mount on the node, which the next
# container's start command detaches before mounting (--arch auto on a
# recorded MI210 topology), and the workloads see the new view.
#
# Usage (root): unshare -m --propagation private bash tests/propagation.sh KPACKFS WORKDIR
# The outer private namespace keeps every mount away from the machine's.
set -euo pipefail
K=$1
W=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
src=$repo/test_assets/demo-install
# PID 1 of each "container" is a grandchild; the EXIT trap ends them too.
inits=()
trap 'kill -KILL "${inits[@]}" $(jobs -p) 2>/dev/null || true' EXIT
fail() { echo "propagation: FAIL: $*" >&2; exit 1; }
ok() { echo "propagation: ok: $*"; }

# The DaemonSet's start command, with the container's paths as variables
# ($V = /host/kpackfs, $S = /rocm); the YAML must hold the same cleanup.
start='stat -f "$V/rocm" >/dev/null 2>&1 || umount -l "$V/rocm" 2>/dev/null || true
mkdir -p "$V/rocm"
exec "$K" mount "$S" "$V/rocm" --arch "$A" -f --allow-other --cache-dir none'
grep -qF 'stat -f /host/kpackfs/rocm >/dev/null 2>&1 || umount -l /host/kpackfs/rocm 2>/dev/null || true' \
  "$repo/docs/examples/kpackfs-daemonset.yaml" || fail "the DaemonSet's start command differs from this script's"

cd "$W"
mkdir -p node/kpackfs daemon app-parent app-mnt app-late
mount --bind node/kpackfs node/kpackfs
mount --make-shared node/kpackfs

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
  fail "the view never reached the node (log: $(cat daemon.log))"
}
# container ARCH [ENV…]: init = PID 1 of a new PID+mount namespace with the
# hostPath rshared at $W/daemon; kp = kpackfs, started by the start command.
container() {
  local arch=$1 u e
  shift
  unshare -m -p -f --propagation unchanged sleep 600 >/dev/null 2>&1 &
  u=$!
  init=
  while [ -z "$init" ]; do init=$(cat /proc/$u/task/$u/children 2>/dev/null | tr -d ' '); sleep 0.01; done
  inits+=("$init")
  while [ "$(readlink /proc/$init/ns/mnt)" = "$own" ]; do sleep 0.01; done
  ns "$init" mount --rbind "$W/node/kpackfs" "$W/daemon"
  ns "$init" mount --make-rshared "$W/daemon"
  nsenter -t "$init" -m -p env "$@" V="$W/daemon" S="$src" K="$K" A="$arch" sh -c "$start" >>daemon.log 2>&1 &
  e=$!
  e_job=$e
  kp=
  while [ -z "$kp" ]; do kp=$(cat /proc/$e/task/$e/children 2>/dev/null | tr -d ' '); sleep 0.01; done
}

new_ns parent slave
ns "$parent" mount --rbind -o ro "$W/node/kpackfs" "$W/app-parent"
mkdir node/kpackfs/rocm
new_ns mnt slave
ns "$mnt" mount --rbind -o ro "$W/node/kpackfs/rocm" "$W/app-mnt"

container gfx90a
wait_view
want="libdemo.so.1.0_gfx90a:xnack+.kpack libdemo.so.1.0_gfx90a:xnack-.kpack libdemo2.so_gfx90a.kpack "
[ "$(ls node/kpackfs/rocm/lib/.kpack | tr '\n' ' ')" = "$want" ] || fail "node sees $(ls node/kpackfs/rocm/lib/.kpack)"
ok "the container's mount (rshared) reached the node"
[ "$(kpack_names "$parent" "$W/app-parent/rocm")" = "$want" ] || fail "parent workload sees $(kpack_names "$parent" "$W/app-parent/rocm")"
[ "$(kpack_names "$mnt" "$W/app-mnt")" = "$want" ] || fail "mountpoint workload sees $(kpack_names "$mnt" "$W/app-mnt")"
ok "workloads started before the mount (rslave) see it, through the parent directory and the mountpoint"
new_ns late slave
ns "$late" mount --rbind -o ro "$W/node/kpackfs/rocm" "$W/app-late"
[ "$(kpack_names "$late" "$W/app-late")" = "$want" ] || fail "late workload sees $(kpack_names "$late" "$W/app-late")"
ok "a workload started after the mount sees it"
a=$(sha256sum <node/kpackfs/rocm/lib/libdemo.so.1.0)
b=$(ns "$parent" sh -c "sha256sum <'$W/app-parent/rocm/lib/libdemo.so.1.0'")
[ "$a" = "$b" ] || fail "the workload reads other bytes than the node"
if ns "$parent" touch "$W/app-parent/rocm/x" 2>/dev/null; then fail "the workload could write"; fi
ok "workloads read the node's bytes and cannot write"

kill -TERM "$kp"
for _ in $(seq 200); do [ -e "/proc/$kp" ] || break; sleep 0.05; done
[ ! -e "/proc/$kp" ] || fail "kpackfs still runs 10 s after SIGTERM"
if mountpoint -q node/kpackfs/rocm; then fail "the node still has the view after SIGTERM"; fi
if ns "$parent" mountpoint -q "$W/app-parent/rocm"; then fail "the parent workload still has the view"; fi
[ -z "$(ns "$mnt" ls -A "$W/app-mnt")" ] || fail "the mountpoint workload still sees files"
ok "SIGTERM to kpackfs unmounted the view on the node and in the workloads"
kill -KILL "$init"

container gfx1030
wait_view
want="libdemo.so.1.0_gfx1030.kpack libdemo2.so_gfx1030.kpack "
[ "$(kpack_names "$parent" "$W/app-parent/rocm")" = "$want" ] || fail "after a restart the parent workload sees $(kpack_names "$parent" "$W/app-parent/rocm")"
[ "$(kpack_names "$mnt" "$W/app-mnt")" = "$want" ] || fail "after a restart the mountpoint workload sees $(kpack_names "$mnt" "$W/app-mnt")"
ok "a restarted container reaches the running workloads"
case "$(kpack_names "$late" "$W/app-late")" in
  *"not connected"*) ok "the workload that bound the live mountpoint keeps the dead connection (as documented)" ;;
  *) fail "late workload: expected a dead connection, saw $(kpack_names "$late" "$W/app-late")" ;;
esac

# The container dies outright: the kernel kills every process of its PID
# namespace, the unmount watchdog included.
kill -KILL "$init"
wait "$e_job" 2>/dev/null || true
for _ in $(seq 200); do [ -e "/proc/$kp" ] || break; sleep 0.05; done
case "$(ls node/kpackfs/rocm 2>&1)" in
  *"not connected"*) ok "a killed container leaves a dead mount on the node" ;;
  *) fail "after SIGKILL the node shows: $(ls node/kpackfs/rocm 2>&1)" ;;
esac
container auto KPACKFS_SYSFS_ROOT="$repo/tests/fixtures/kfd/mi210"
wait_view
want="libdemo.so.1.0_gfx90a:xnack-.kpack libdemo2.so_gfx90a.kpack "
[ "$(ls node/kpackfs/rocm/lib/.kpack | tr '\n' ' ')" = "$want" ] || fail "after the cleanup the node sees $(ls node/kpackfs/rocm/lib/.kpack 2>&1) (log: $(cat daemon.log))"
[ "$(kpack_names "$parent" "$W/app-parent/rocm")" = "$want" ] || fail "after the cleanup the parent workload sees $(kpack_names "$parent" "$W/app-parent/rocm")"
[ "$(kpack_names "$mnt" "$W/app-mnt")" = "$want" ] || fail "after the cleanup the mountpoint workload sees $(kpack_names "$mnt" "$W/app-mnt")"
[ "$(grep -c " $W/node/kpackfs/rocm " /proc/self/mountinfo)" = 1 ] || fail "the dead mount is still stacked under the new one"
ok "the next container's start command detached the dead mount; its view (--arch auto, MI210) reaches the workloads"
kill -TERM "$kp"
for _ in $(seq 200); do [ -e "/proc/$kp" ] || break; sleep 0.05; done
if mountpoint -q node/kpackfs/rocm; then fail "the node still has the view after the last SIGTERM"; fi
echo "propagation: all checks passed"
