"""routing/ is a pure library: no I/O modules, no wall clock, no global random."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import routing
from routing.pipeline.scoring import RoutingInvariantError, Scores

ROOT = Path(routing.__file__).parent
FORBIDDEN_MODULES = {
    "asyncio", "socket", "ssl", "selectors", "redis", "grpc", "aiohttp", "prometheus_client",
    "geoip2", "maxminddb", "uvloop", "http", "urllib", "requests", "subprocess", "threading",
    "multiprocessing", "time", "datetime",
}  # fmt: skip
FORBIDDEN_RANDOM_CALLS = {"random", "randint", "randrange", "choice", "shuffle", "uniform", "seed"}


def _files() -> list[Path]:
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 10
    return files


def import_offenders(source: str, name: str) -> list[str]:
    """Every import of a forbidden module in ``source`` (absolute imports; relative ones stay
    inside routing/), including ``__import__``/``importlib`` spelled out."""
    offenders = []
    for node in ast.walk(ast.parse(source, name)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            names = ["__import__"]
        line = getattr(node, "lineno", 0)
        offenders += [f"{name}:{line}: {n}" for n in names if _forbidden(n)]
    return offenders


def _forbidden(module: str) -> bool:
    return module.split(".")[0] in FORBIDDEN_MODULES | {"importlib", "__import__"}


def random_offenders(source: str, name: str) -> list[str]:
    """Every call of the global random generator (``random.choice(...)`` and the like)."""
    offenders = []
    for node in ast.walk(ast.parse(source, name)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "random"
            and node.func.attr in FORBIDDEN_RANDOM_CALLS
        ):
            offenders.append(f"{name}:{node.lineno}")
    return offenders


def test_routing_imports_no_io_or_clock_module() -> None:
    offenders = [o for path in _files() for o in import_offenders(path.read_text(), str(path))]
    assert offenders == []


def test_routing_never_uses_the_global_random_generator() -> None:
    offenders = [o for path in _files() for o in random_offenders(path.read_text(), str(path))]
    assert offenders == []


def test_the_checks_catch_every_kind_of_offender() -> None:
    """The same functions that scan routing/ find each offence in a planted module."""
    planted = (
        "import time\n"
        "from asyncio import sleep\n"
        "import os.path, socket\n"
        "from urllib.request import urlopen\n"
        "from . import types\n"  # relative: fine
        "from routing import scorers\n"  # routing's own: fine
        "clock = __import__('time')\n"
        "import random\n"
        "pick = random.choice([1, 2])\n"
        "rng = random.Random(7).choice([1, 2])\n"  # a seeded generator: fine
    )
    assert import_offenders(planted, "planted.py") == [
        "planted.py:1: time",
        "planted.py:2: asyncio",
        "planted.py:3: socket",
        "planted.py:4: urllib.request",
        "planted.py:7: __import__",
    ]
    assert random_offenders(planted, "planted.py") == ["planted.py:9"]


def test_the_scan_reads_every_routing_module() -> None:
    scanned = {path.relative_to(ROOT).as_posix() for path in _files()}
    assert {"__init__.py", "types.py"} <= scanned
    assert all(not name.startswith("..") for name in scanned)


def assert_offenders(root: Path) -> list[str]:
    """Every ``assert`` statement under ``root``: on the request path one is a crash (and
    ``python -O`` removes it); an impossible state raises a named error instead."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        offenders += [f"{path}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    return offenders


def test_no_assert_on_the_request_path() -> None:
    gateway_root = ROOT.parent / "gateway"
    assert gateway_root.is_dir()
    assert assert_offenders(ROOT) == [] and assert_offenders(gateway_root) == []


def test_the_assert_scan_finds_one(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(x):\n    assert x\n")
    assert assert_offenders(tmp_path) == [f"{tmp_path / 'm.py'}:2"]


def test_scores_of_a_predicting_scorer_without_a_prediction_are_an_invariant_error() -> None:
    scores = Scores(np.zeros(1), "predicted TTFT (ms)")
    with pytest.raises(RoutingInvariantError, match="without a prediction"):
        scores.predicted()
