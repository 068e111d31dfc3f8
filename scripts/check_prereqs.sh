#!/bin/sh
# What `make run` and `make test` need before anything else: Python >= 3.11 with its venv module
# (Debian splits it into python3-venv) and make. Says every missing piece at once, and how to get it.
set -u
PYTHON="${PYTHON:-python3}"
missing=""

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    missing="$missing\n  - $PYTHON not found: install Python >= 3.11 (Debian: apt-get install python3)"
elif ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    found=$("$PYTHON" -c 'import platform; print(platform.python_version())')
    missing="$missing\n  - $PYTHON is $found; Meridian needs >= 3.11 (or run make PYTHON=python3.11 ...)"
elif ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing="$missing\n  - $PYTHON has no working venv module (Debian: apt-get install python3-venv)"
fi
if ! command -v make >/dev/null 2>&1; then
    missing="$missing\n  - make not found (Debian: apt-get install make)"
fi

if [ -n "$missing" ]; then
    printf "check_prereqs: missing:%b\n" "$missing" >&2
    exit 1
fi
echo "check_prereqs: $("$PYTHON" -c 'import platform; print(platform.python_version())'), venv and make present"
