#!/usr/bin/env bash
# kube-down.sh stops the test cluster that scripts/kube-up.sh started and
# cleans what it made on the host: its processes (by the pids it recorded),
# pod containers and their mounts, the ferrykube0 bridge, the kubepods
# cgroups, kube-proxy's nft tables and the CNI plugins' iptables chains; it
# puts back the sysctls the kubelet changed. With --keep-data (used by
# kube-up.sh when it restarts an unhealthy cluster) etcd's data, the
# certificates and the images stay; without it /var/lib/ferry-kube goes too,
# except the logs. The build cache (/var/cache/ferry-kube) always stays.
set -uo pipefail
K=/var/lib/ferry-kube
R=/run/ferry-kube
keep=0
[ "${1:-}" = --keep-data ] && keep=1
[ "$(id -u)" = 0 ] || { echo "kube-down: needs root" >&2; exit 1; }
if [ "${FERRY_KUBE_LOCKED:-}" != 1 ]; then exec 9>/run/ferry-kube.lock; flock 9; fi

stop() { # name: TERM, then KILL after 10 s, by the recorded pid only
  local f=$R/pids/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && grep -q "$1" /proc/$pid/cmdline 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
}
# The kubelet first, so it does not restart pods; then the pods' containers
# (runc shims of our containerd), then the rest.
stop kubelet
stop kube-proxy
if [ -S $R/containerd.sock ]; then
  ctr="ctr --address $R/containerd.sock -n k8s.io"
  for c in $($ctr tasks ls -q 2>/dev/null); do $ctr tasks kill -s SIGKILL "$c" >/dev/null 2>&1; done
  sleep 1
  for c in $($ctr tasks ls -q 2>/dev/null); do $ctr tasks delete -f "$c" >/dev/null 2>&1; done
  for c in $($ctr containers ls -q 2>/dev/null); do $ctr containers delete "$c" >/dev/null 2>&1; done
fi
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop containerd
stop etcd
# containerd-shim processes whose containerd was ours (their -address names our socket).
for p in /proc/[0-9]*; do
  if tr '\0' ' ' 2>/dev/null < $p/cmdline | grep -q "containerd-shim.*-address $R/containerd.sock"; then
    kill -9 "${p#/proc/}" 2>/dev/null
  fi
done

# Mounts under our folders (pod volumes, sandboxes' shm, overlay rootfs), deepest first.
awk -v k="$K/" -v r="$R/" 'index($2, k) == 1 || index($2, r) == 1 {print $2}' /proc/mounts | sort -r |
  while read -r m; do umount -l "$m" 2>/dev/null; done
# Network: the bridge, pods' veths go with their netns; kube-proxy's nft tables;
# the CNI plugins' iptables chains (bridge ipMasq, firewall).
ip link del ferrykube0 2>/dev/null
nft delete table ip kube-proxy 2>/dev/null
nft delete table ip6 kube-proxy 2>/dev/null
for t in filter nat; do
  iptables -t $t -S 2>/dev/null | grep -E '^-A .* -j CNI-' | sed 's/^-A/-D/' |
    while read -r rule; do eval iptables -t $t "$rule" 2>/dev/null; done
  for ch in $(iptables -t $t -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^CNI-/ {print $2}'); do iptables -t $t -F "$ch" 2>/dev/null; done
  for ch in $(iptables -t $t -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^CNI-/ {print $2}'); do iptables -t $t -X "$ch" 2>/dev/null; done
done
# The kubelet's cgroups (cgroupfs driver): /kubepods in each hierarchy, leaves first.
for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
done
# Sysctls back as they were before the first kube-up.sh.
if [ -f $K/sysctl.saved ]; then
  while IFS= read -r kv; do sysctl -qw "$kv" 2>/dev/null; done < $K/sysctl.saved
  rm -f $K/sysctl.saved
fi
rm -rf $R $K/cni/ipam
if [ $keep = 0 ]; then
  find $K -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} + 2>/dev/null
fi
echo "kube-down: stopped"
