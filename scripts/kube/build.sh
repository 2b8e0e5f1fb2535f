#!/usr/bin/env bash
# Builds (or finds in the cache) the Kubernetes and CoreDNS binaries of the
# test cluster and prints the folder that holds them.
#   KUBE_CACHE  cache root (default /var/cache/ferry-kube)
# The cache key is the sha256 of this folder's go.mod and go.sum and of the Go
# version, so a changed pin or toolchain builds anew.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${KUBE_CACHE:-/var/cache/ferry-kube}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
KUBE_VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go.mod")
key=$( { cat "$here/go.mod" "$here/go.sum"; go version; echo "coredns $COREDNS_VERSION"; } | sha256sum | cut -c1-16)
bin=$cache/$key/bin
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy)
ok=1
for c in "${cmds[@]}" coredns; do [[ -x $bin/$c ]] || ok=0; done
if [[ $ok == 1 ]]; then echo "$bin"; exit 0; fi
mkdir -p "$bin.tmp"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
cpkg=k8s.io/client-go/pkg/version
ld+=" -X $cpkg.gitVersion=$KUBE_VERSION -X $cpkg.gitMajor=1 -X $cpkg.gitMinor=$minor -X $cpkg.gitTreeState=clean"
t0=$(date +%s)
missing=()
for c in "${cmds[@]}"; do [[ -x $bin/$c ]] || missing+=("$c"); done
if ((${#missing[@]})); then
  echo "kube build: building ${missing[*]} ($KUBE_VERSION) into $bin (cold: ~15-40 min on 2 cores)" >&2
  (cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$bin.tmp/" \
    $(printf 'k8s.io/kubernetes/cmd/%s ' "${missing[@]}")) >&2
fi
if [[ ! -x $bin/coredns ]]; then
  echo "kube build: go install coredns $COREDNS_VERSION" >&2
  (cd /tmp && CGO_ENABLED=0 GOBIN="$bin.tmp" GOFLAGS= go install -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION") >&2
fi
mkdir -p "$bin"
for f in "$bin.tmp"/*; do [[ -e $f ]] && mv -f "$f" "$bin/"; done
rmdir "$bin.tmp"
echo "kube build: done in $(( $(date +%s) - t0 )) s" >&2
echo "$bin"
