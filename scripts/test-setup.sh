#!/usr/bin/env bash
# test-setup.sh installs and starts every real component the tests use:
# Docker (engine started if it is not running), OpenSSH's server, Debian's
# torch for the distributed tests, Chromium for the studio's browser tests,
# debootstrap and python3-venv, the two
# images made without a registry (ferry-base, ferry-node), and a one-host
# Slurm cluster (scripts/slurm-setup.sh, left running), an OCI registry
# (scripts/registry-up.sh, left running) and a one-node Kubernetes cluster
# (scripts/kube-up.sh, left running). It is idempotent:
# what is already there is left alone, so a second run takes seconds.
#
# Both the README's test command (scripts/test.sh) and CI (.ci/run) call it.
# Installing needs root (or sudo); without either it says what is missing and
# how to get it, and the tests that need those parts skip with the same advice.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

for tool in python3 bash go; do
  command -v "$tool" >/dev/null || { echo "test-setup: $tool is required" >&2; exit 1; }
done

as_root=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    as_root=(none)
  fi
fi

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v docker >/dev/null || need+=(docker.io)
# A real OpenSSH server for the attached-machine (virtualmachine) tests.
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
# Debian's torch for the distributed (DDP, gloo) tests; only /usr/bin/python3 sees it.
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || need+=(python3-torch)
/usr/bin/python3 -c 'import pandas' 2>/dev/null || need+=(python3-pandas) # batch scoring's DataFrame results
# Debian's Chromium, driven headless by the studio's browser tests.
command -v chromium >/dev/null || need+=(chromium)

if [ ${#need[@]} -gt 0 ]; then
  if [ "${as_root[*]}" = none ]; then
    echo "test-setup: missing ${need[*]}; as root run: apt-get install ${need[*]}" >&2
    echo "test-setup: the tests that need them will be skipped (and say so)" >&2
    exit 0
  fi
  echo "test-setup: installing ${need[*]} (apt-get, a few minutes the first time)"
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "${as_root[*]}" = none ]; then
  docker info >/dev/null 2>&1 || echo "test-setup: no Docker engine answers; the Docker tests will be skipped" >&2
  echo "test-setup: not root: the images, the Slurm cluster and the run-as tests need root (sudo bash scripts/test.sh)" >&2
  exit 0
fi

# The engine: some machines start it; start it if it is not running.
if ! docker info >/dev/null 2>&1; then
  echo "test-setup: starting dockerd (log in /tmp/ferry-dockerd.log)"
  ("${as_root[@]}" dockerd >/tmp/ferry-dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "test-setup: dockerd did not start; see /tmp/ferry-dockerd.log" >&2; exit 1; }
fi
# The image environments' base image, made without a registry (once).
"${as_root[@]}" bash scripts/make-base-image.sh
# The docker node provider's image (the base + python3-torch), also once.
"${as_root[@]}" bash scripts/make-node-image.sh
# A real Slurm cluster on this host (munged, slurmctld, four slurmd) for the
# Slurm compute target's tests; once started it is left running.
"${as_root[@]}" bash scripts/slurm-setup.sh
# A real registry (Debian's docker-registry, 127.0.0.1:5000, htpasswd logins)
# that Ferry pushes the images it builds for a kubernetes compute to, and
# the test cluster pulls them from; left running.
"${as_root[@]}" bash scripts/registry-up.sh
# A real single-node Kubernetes cluster for the Kubernetes compute target's
# tests (kubeconfig /var/lib/ferry-kube/admin.kubeconfig); left running.
# The first run builds Kubernetes (cached in /var/cache/ferry-kube).
kube_t0=$(date +%s)
"${as_root[@]}" bash scripts/kube-up.sh
echo "test-setup: kube-up.sh took $(( $(date +%s) - kube_t0 )) s"
