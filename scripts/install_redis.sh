#!/bin/sh
# Make `redis-server` and `redis-cli` available (Debian/Ubuntu). Idempotent: does nothing when
# both are already on PATH. Must run as root on a fresh machine; never prompts.
#
# The Debian package starts a system-wide server on :6379 where an init system runs; the tests
# start their own servers on free ports, so the system one is neither needed nor stopped here.
set -eu
sh "$(dirname "$0")/install_debian_packages.sh" redis-server=redis-server redis-cli=redis-tools
echo "install_redis: $(redis-server --version | cut -d' ' -f1-3)"
