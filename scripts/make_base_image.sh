#!/bin/sh
# A Debian bookworm base image made offline from Debian's own packages, for CI machines that
# cannot pull from a container registry: debootstrap --variant=minbase (about a minute), then
# `podman import`. Cached: does nothing when the image already exists.
# Usage: make_base_image.sh [IMAGE]   (default localhost/meridian-base:bookworm)
set -eu
IMAGE="${1:-localhost/meridian-base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if podman image exists "$IMAGE"; then
    echo "make_base_image: $IMAGE already exists"
    exit 0
fi
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT
# python3-venv brings pip into each venv (ensurepip); ca-certificates for HTTPS backends.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$ROOTFS" "$MIRROR" >/dev/null
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" -c . | podman import --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "make_base_image: $IMAGE made with debootstrap ($(du -sh "$ROOTFS" | cut -f1))"
