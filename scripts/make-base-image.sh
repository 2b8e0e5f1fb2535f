#!/usr/bin/env bash
# make-base-image.sh makes ferry-base:bookworm, a small Debian image with
# python3, for image environments and the docker node provider, without any
# container registry: debootstrap --variant=minbase into a folder, then
# `docker import`. It does nothing when the image is already there.
#
#   scripts/make-base-image.sh [TAG]      (default ferry-base:bookworm)
#
# Needs root, debootstrap (apt-get install debootstrap) and a Debian mirror
# (MIRROR, default http://deb.debian.org/debian). About a minute.
set -euo pipefail
tag=${1:-ferry-base:bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "make-base-image: $tag is already there"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "make-base-image: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

root=$(mktemp -d /tmp/ferry-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "make-base-image: debootstrap of Debian bookworm from $mirror into $root (full log: $root.log)"
# Its phases and package counts are shown as it goes (build-progress.awk).
debootstrap --variant=minbase --include=python3-minimal,python3-venv bookworm "$root" "$mirror" 2>&1 \
  | tee "$root.log" | awk -v who=make-base-image -f "$(dirname "$0")/build-progress.awk" \
  || { tail -30 "$root.log" >&2; echo "make-base-image: debootstrap failed; log in $root.log" >&2; exit 1; }
rm -f "$root.log"
# A smaller image: no apt lists, caches or docs.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* "$root"/usr/share/man/*
echo "make-base-image: importing $(du -sh "$root" | cut -f1) into Docker as $tag (${SECONDS}s so far)"
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "make-base-image: made $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes) in ${SECONDS}s"
