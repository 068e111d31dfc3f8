#!/bin/sh
# Build the container image on this machine and test it (make image-test; .ci/run runs it).
# podman + buildah + runc from Debian (as root), a debootstrap base image (cached), the
# project's dependencies as wheels from the host's pip (cached), a build with no network,
# then tests/deploy/test_image.py against the image. Prints how long each part took.
set -eu
cd "$(dirname "$0")/.."
BIN=.venv/bin
BASE=localhost/meridian-base:bookworm
IMAGE=localhost/meridian:ci
export CONTAINERS_CONF="$PWD/deploy/docker/ci/containers.conf"

step() { STEP_NAME=$1; STEP_START=$(date +%s); }
done_step() { echo "image-test: $STEP_NAME took $(( $(date +%s) - STEP_START )) s"; }

# The dnsname CNI plugin lets compose services find each other by name (test_compose_up.py).
step "container tools"
PATH="$PATH:/usr/lib/cni" sh scripts/install_debian_packages.sh podman=podman buildah=buildah \
    runc=runc debootstrap=debootstrap dnsname=golang-github-containernetworking-plugin-dnsname
done_step

step "base image"
sh scripts/make_base_image.sh "$BASE"
done_step

# Debian's python3 is 3.11.2, below redis' python_full_version < "3.11.3" marker for
# async-timeout, which the host's newer Python skips: fetch it explicitly.
step "wheelhouse"
mkdir -p .cache/wheelhouse
$BIN/pip wheel --quiet --wheel-dir .cache/wheelhouse . "setuptools>=77" wheel
$BIN/pip download --quiet --dest .cache/wheelhouse "async-timeout>=4.0.3"
rm -f .cache/wheelhouse/meridian_gateway-*.whl
done_step

step "image build (no network)"
podman build --quiet --format docker --network none -f deploy/docker/Dockerfile \
    --build-arg BASE_IMAGE="$BASE" --build-arg WHEELHOUSE=.cache/wheelhouse \
    --build-arg PIP_OPTIONS=--no-index -t "$IMAGE" .
done_step

step "image test"
MERIDIAN_IMAGE="$IMAGE" MERIDIAN_DEPLOY_TOOLS=required $BIN/pytest -q -p no:cacheprovider \
    tests/deploy/test_image.py tests/deploy/test_compose_up.py
done_step
podman image prune --force >/dev/null
