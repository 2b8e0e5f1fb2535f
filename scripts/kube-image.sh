#!/usr/bin/env bash
# kube-image.sh NAME:TAG...: copies Docker images into the test cluster's
# containerd (scripts/kube-up.sh), where pods use them with
# imagePullPolicy: Never (the cluster reaches no registry).
set -euo pipefail
sock=${FERRY_KUBE_CONTAINERD:-/run/ferry-kube/containerd.sock}
ctr=$(command -v ctr || echo /usr/bin/ctr)
[ $# -gt 0 ] || { echo "usage: kube-image.sh NAME:TAG..." >&2; exit 2; }
[ -S "$sock" ] || { echo "kube-image: no containerd at $sock: run scripts/kube-up.sh first" >&2; exit 1; }
for img in "$@"; do
  docker image inspect "$img" >/dev/null 2>&1 || { echo "kube-image: docker has no image $img" >&2; exit 1; }
  docker save "$img" | "$ctr" --address "$sock" -n k8s.io images import - >/dev/null
done
