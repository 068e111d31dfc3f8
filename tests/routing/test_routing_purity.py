"""routing/ is a pure library: no I/O modules, no wall clock, no global random."""

from __future__ import annotations

import ast
from pathlib import Path

import routing

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


def test_routing_imports_no_io_or_clock_module() -> None:
    offenders = []
    for path in _files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES
            ]
    assert offenders == []


def test_routing_never_uses_the_global_random_generator() -> None:
    offenders = []
    for path in _files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "random"
                and node.func.attr in FORBIDDEN_RANDOM_CALLS
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_the_check_would_catch_an_offender(tmp_path: Path) -> None:
    tree = ast.parse("import time\nfrom asyncio import sleep\n")
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert len(found) == 2
