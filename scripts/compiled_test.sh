#!/bin/sh
# The opt-in compiled build, tested (make compiled-test; .ci/run runs it).
# Builds the wheel a user gets from `MERIDIAN_COMPILE=1 pip install .` (an isolated build: pip
# fetches setuptools and mypy itself), puts its extensions beside a copy of this tree's sources,
# and runs the routing, simulator and gateway tests there with MERIDIAN_EXPECT_COMPILED=1, which
# fails the run if any module of routing/compiled_modules.py imported as Python. Then the same
# simulator scenarios run on both builds: every policy must make the same decisions, to the
# last request's numbers (only the runs' wall times may differ).
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

step "same decisions as the interpreted build"
for scenario in 1-three-region-spike 2-prefix-heavy-multitenant 5-path-degrades-and-recovers; do
    for side in interpreted compiled; do
        if [ "$side" = compiled ]; then tree=$WORK/src; else tree=$ROOT; fi
        (cd "$tree" && PYTHONPATH="$tree" "$BIN/python" -m gateway.cli sim \
            "loadtests/scenarios/$scenario.yaml" --requests 2000 --no-plots \
            --out "$WORK/sim/$side/$scenario" > /dev/null)
    done
done
"$BIN/python" - "$WORK/sim" <<'PY'
import json, pathlib, sys
WALL_TIMES = {"wall_s", "trace_build_s"}  # how long a run took: the only fields allowed to differ
def outcomes(value):
    if isinstance(value, dict):
        return {k: outcomes(v) for k, v in value.items() if k not in WALL_TIMES}
    if isinstance(value, list):
        return [outcomes(v) for v in value]
    return value
sim = pathlib.Path(sys.argv[1])
for run in sorted((sim / "interpreted").iterdir()):
    interpreted = outcomes(json.loads((run / "results.json").read_text()))
    compiled = outcomes(json.loads((sim / "compiled" / run.name / "results.json").read_text()))
    if interpreted != compiled:
        sys.exit(f"compiled-test: {run.name}: the compiled build decided differently")
    print(f"compiled-test: {run.name}: the same results from both builds")
PY
done_step
