"""Every third-party module the product imports is a declared dependency, and the product
imports no benchmark code beyond the emulated engine.

A module-level import in ``gateway/``, ``routing/`` or ``proto/`` must be provided by a
distribution in ``[project] dependencies``: a plain ``pip install`` has nothing else. An import
inside a function may come from an extra (it runs only where that extra is needed, like
``proto/generate.py``'s ``grpc_tools``).

The emulated engine (``loadtests/emulator`` and the two small helpers it uses) is a runtime
component: ``meridian serve`` without ``--config`` runs it. Nothing else in ``loadtests/`` may be
imported by ``gateway/``, statically or transitively.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from tests.deploy.tools import ROOT

PRODUCT = ("gateway", "routing", "proto")
OWN = {"gateway", "routing", "proto", "loadtests"}
# The emulated engine and what it imports from loadtests/ (RTT lookup, validation messages).
EMULATED_ENGINE = ("loadtests.emulator", "loadtests.rtt_matrix", "loadtests.validation")
BENCHMARKS = ("loadtests.emulator.self_accuracy",)  # a benchmark that lives beside the engine


def _names(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower().replace("_", "-")
        for r in requirements
    }


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(module, at module level) for every absolute import outside ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for b in node.body for n in ast.walk(b)}
    nested = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            nested |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) not in nested
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, id(node) not in nested


def _product_files() -> Iterator[Path]:
    for package in PRODUCT:
        yield from (ROOT / package).rglob("*.py")


def test_every_module_level_third_party_import_is_declared() -> None:
    declared = _names(list(_project()["dependencies"]))  # type: ignore[call-overload]
    extras = _names(
        [r for rs in _project()["optional-dependencies"].values() for r in rs]  # type: ignore[attr-defined]
    )
    providers = md.packages_distributions()
    problems = []
    for path in _product_files():
        for module, top_level in _imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in OWN or top == "__future__":
                continue
            dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
            where = path.relative_to(ROOT)
            if not dists:
                problems.append(f"{where}: {module}: no installed distribution provides it")
            elif not dists & (declared if top_level else declared | extras):
                problems.append(f"{where}: {module}: provided by {sorted(dists)}, not declared")
    assert not problems, "\n".join(problems)


def test_gateway_imports_only_the_emulated_engine_from_loadtests() -> None:
    problems = []
    for path in (ROOT / "gateway").rglob("*.py"):
        for module, _ in _imports(path):
            if module.split(".")[0] != "loadtests" or module == "loadtests":
                continue
            allowed = module.startswith(EMULATED_ENGINE) and not module.startswith(BENCHMARKS)
            if not allowed:
                problems.append(f"{path.relative_to(ROOT)}: imports {module}")
    assert not problems, "\n".join(problems)


def test_importing_every_gateway_module_loads_no_benchmark_code() -> None:
    """Transitively: importing all of gateway/ pulls in the emulated engine and nothing else."""
    script = (
        "import pkgutil, importlib, sys, gateway\n"
        "for m in pkgutil.walk_packages(gateway.__path__, 'gateway.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('\\n'.join(sorted(n for n in sys.modules if n.startswith('loadtests.'))))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    assert "loadtests.emulator.server" in loaded  # the embedded default's engine
    outside = [m for m in loaded if not m.startswith(EMULATED_ENGINE) or m.startswith(BENCHMARKS)]
    assert not outside, outside
