#!/bin/sh
# Usage: install_debian_packages.sh COMMAND=PACKAGE ...
# Make each COMMAND available by installing its Debian/Ubuntu PACKAGE when it is not on PATH,
# with one `apt-get update` for all of them. Idempotent: does nothing when every command is
# there. Must run as root (or with sudo) on a fresh machine; never prompts.
set -eu

missing=""
for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null 2>&1 || missing="$missing ${pair#*=}"
done

if [ -z "$missing" ]; then
    echo "install_debian_packages: already installed: $*"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_debian_packages: apt-get not found; install:$missing with your package manager" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_debian_packages: must run as root (or with sudo available)" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086  # one word per package
$SUDO apt-get install -y -q --no-install-recommends $missing
echo "install_debian_packages: installed$missing"
