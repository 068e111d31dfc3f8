#!/bin/sh
# The wheels of Meridian's runtime dependencies (pyproject.toml's [project.dependencies], and
# theirs), downloaded into .venv/wheelhouse by `make setup`. tests/deploy/test_wheel.py installs
# the built wheel into a fresh venv from there with --no-index: the plain install a user gets,
# checked without the test itself reaching the package index (tests talk to loopback only).
# Run again whenever pyproject.toml changes (the setup stamp depends on it); a fresh directory
# each time, so a dependency dropped from pyproject.toml cannot linger there.
set -eu
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOUSE=.venv/wheelhouse
REQS=$(mktemp)
trap 'rm -f "$REQS"' EXIT
"$BIN/python" -c '
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
' > "$REQS"
rm -rf "$HOUSE"
"$BIN/python" -m pip download --quiet --disable-pip-version-check --dest "$HOUSE" -r "$REQS"
