#!/usr/bin/env bash
# make-node-image.sh makes ferry-node:bookworm, the image of the docker node
# provider's nodes: ferry-base:bookworm (scripts/make-base-image.sh, made
# first when missing) with Debian's python3-torch and python3-numpy, which
# the multi-node PyTorch jobs use, from the Debian mirror and no container
# registry. The ferry binary is not in the image: the provider bind-mounts
# the server's own, so the image does not go stale when Ferry changes. It
# does nothing when the image is already there. It prints the build's steps
# and apt's progress as it goes; the full log is kept when it fails.
#
#   [BASE=IMAGE] scripts/make-node-image.sh [TAG]
#   (TAG defaults to ferry-node:bookworm, BASE to ferry-base:bookworm)
#
# Needs a Docker engine whose containers reach the Debian mirror of the base
# image's /etc/apt/sources.list. About two minutes; the image is about 1.3 GB.
set -euo pipefail
tag=${1:-ferry-node:bookworm}
base=${BASE:-ferry-base:bookworm}

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "make-node-image: $tag is already there"
  exit 0
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
  "$(dirname "$0")/make-base-image.sh" "$base"
fi

log=$(mktemp /tmp/ferry-node-image.XXXXXX.log)
echo "make-node-image: building $tag from $base with Debian's python3-torch and python3-numpy (about 1.3 GB; full log: $log)"
# No build context: the Dockerfile comes on stdin and copies nothing in.
# Its steps and apt's package counts are shown as it goes
# (build-progress.awk); pipefail makes a failed build fail the pipeline.
docker build -t "$tag" - 2>&1 <<DOCKERFILE | tee "$log" | awk -v who=make-node-image -f "$(dirname "$0")/build-progress.awk" || { tail -30 "$log" >&2; echo "make-node-image: docker build failed; log in $log" >&2; exit 1; }
FROM $base
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-torch python3-numpy \\
 && apt-get clean \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*
LABEL ferry.image=node
DOCKERFILE
rm -f "$log"
echo "make-node-image: made $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes) in ${SECONDS}s"
