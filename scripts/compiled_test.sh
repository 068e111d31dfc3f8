#!/bin/sh
# The opt-in compiled build, tested (make compiled-test; .ci/run runs it).
# Builds the wheel a user gets from `MERIDIAN_COMPILE=1 pip install .` (an isolated build: pip
# fetches setuptools and mypy itself), puts its extensions beside a copy of this tree's sources,
# and runs the routing, simulator and gateway tests there with MERIDIAN_EXPECT_COMPILED=1, which
# fails the run if any module of routing/compiled_modules.py imported as Python.
# A copy, so the checkout's own runs (make test, coverage) stay pure Python.
set -eu
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/.venv/bin
# COMPILED_TREE=DIR keeps the compiled copy in DIR/src (a --src side for the benchmarks, e.g.
# `python -m loadtests.bench_routing --src compiled=DIR/src`); by default it is removed.
if [ -n "${COMPILED_TREE:-}" ]; then
    mkdir "$COMPILED_TREE" && WORK=$(cd "$COMPILED_TREE" && pwd)
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/meridian-compiled.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
fi

step() { STEP_NAME=$1; STEP_START=$(date +%s); }
done_step() { echo "compiled-test: $STEP_NAME took $(( $(date +%s) - STEP_START )) s"; }

# mypyc writes C: a compiler (the Python headers come with any CPython that builds wheels).
sh scripts/install_debian_packages.sh gcc=gcc

step "copy of the tree"
# A clone (the simulator's pages name the commit) with the working tree's changes on top, so
# uncommitted work is what gets tested.
git clone --quiet --shared "$ROOT" "$WORK/src"
git ls-files -z --cached --others --exclude-standard \
    | tar -c --null --ignore-failed-read -T - -f - 2>/dev/null | tar -x -C "$WORK/src" -f -
git ls-files -z --deleted | (cd "$WORK/src" && xargs -0 rm -f)
done_step

step "compiled wheel"
MERIDIAN_COMPILE=1 "$BIN/pip" wheel --quiet --no-deps --wheel-dir "$WORK/dist" "$WORK/src"
"$BIN/python" - "$WORK/dist" "$WORK/src" <<'PY'
import sys, zipfile, pathlib
dist, src = map(pathlib.Path, sys.argv[1:])
(wheel,) = dist.glob("meridian_gateway-*.whl")
with zipfile.ZipFile(wheel) as archive:
    built = [name for name in archive.namelist() if name.endswith(".so")]
    archive.extractall(src, built)
print(f"compiled-test: {len(built)} extensions from {wheel.name}")
PY
done_step

step "tests against it"
cd "$WORK/src"
MERIDIAN_EXPECT_COMPILED=1 "$BIN/pytest" -q -p no:cacheprovider tests/routing tests/sim tests/gateway
done_step
