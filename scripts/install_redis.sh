#!/bin/sh
# Make `redis-server` and `redis-cli` available (Debian/Ubuntu). Idempotent: does nothing when
# both are already on PATH. Must run as root on a fresh machine; never prompts.
set -eu

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    echo "install_redis: $(redis-server --version | cut -d' ' -f1-3) already installed"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_redis: apt-get not found; install redis-server (>= 6.2) with your package manager" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_redis: must run as root (or with sudo available)" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends redis-server redis-tools

# The Debian package starts a system-wide server on :6379 where an init system runs; the tests
# start their own servers on free ports, so the system one is neither needed nor stopped here.
echo "install_redis: $(redis-server --version | cut -d' ' -f1-3) installed"
