"""Meridian's own programs as subprocesses, for benchmarks that must not share a core or an
event loop with the load generator: ``meridian emulate`` and ``meridian serve``.

Their stderr (the gateway's log) is dropped, unless ``MERIDIAN_BENCH_LOGS`` names a directory:
then each process writes it to a file of its own there (``serve-*.log``, ``emulate-*.log``,
``mock_backend-*.log``), to read why a run had errors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import orjson
import yaml

_READY_TIMEOUT_S = 30.0


@contextlib.asynccontextmanager
async def _process(
    argv: list[str], env: Mapping[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    with _stderr_sink(argv) as stderr:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env, cwd=_checkout(env)
        )
        try:
            yield process
        finally:
            await stop_process(process)


async def stop_process(process: asyncio.subprocess.Process, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it is still running ``grace_s`` later."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # it ended since returncode was read
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), grace_s)
        except TimeoutError:
            process.kill()
            await process.wait()


@contextlib.contextmanager
def _stderr_sink(argv: list[str]) -> Iterator[int | IO[bytes]]:
    """Where a child's stderr goes: nowhere, or a file in ``MERIDIAN_BENCH_LOGS``."""
    folder = os.environ.get("MERIDIAN_BENCH_LOGS")
    if not folder:
        yield asyncio.subprocess.DEVNULL
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    program = next((arg for arg in argv[1:] if not arg.startswith("-")), "process")
    name = program.rsplit(".", 1)[-1] if program != "gateway.cli" else _cli_command(argv)
    with tempfile.NamedTemporaryFile(
        "ab", dir=folder, prefix=f"{name}-", suffix=".log", delete=False
    ) as sink:
        yield sink


def _cli_command(argv: list[str]) -> str:
    """``serve`` or ``emulate``: the ``meridian`` command a ``gateway.cli`` argv runs."""
    return next((arg for arg in argv if arg in ("serve", "emulate")), "meridian")


def _checkout(env: Mapping[str, str] | None) -> str | None:
    """Where a ``python -m`` child must start for ``env``'s ``PYTHONPATH`` to decide whose code
    it runs: ``-m`` puts the working directory first on ``sys.path``, so started from this
    checkout it would import this checkout's packages whatever ``PYTHONPATH`` says."""
    path = (env or {}).get("PYTHONPATH")
    return path.split(os.pathsep)[0] if path else None


async def _readline(process: asyncio.subprocess.Process) -> bytes:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), _READY_TIMEOUT_S)
    if not line:
        raise RuntimeError(f"{process.pid} exited before it was ready")
    return line


async def _ready_url(process: asyncio.subprocess.Process) -> str:
    """A backend's base URL from its JSON lines (``{"url": ...}``), once it says ``ready``."""
    url = ""
    while True:
        message = orjson.loads(await _readline(process))
        url = message.get("url", url)
        if message.get("ready"):
            return str(url)


@contextlib.asynccontextmanager
async def emulated_backend(
    name: str,
    model: str,
    engine: Mapping[str, Any] | None = None,
    faults: Mapping[str, Any] | None = None,
    extra: list[str] | None = None,
) -> AsyncIterator[tuple[str, int]]:
    """One ``meridian emulate --backend`` process; yields (base url, pid)."""
    argv = [sys.executable, "-m", "gateway.cli", "emulate", "--backend", name, "--model", model]
    for key, value in (engine or {}).items():
        argv += ["--engine", f"{key}={value}"]
    for key, value in (faults or {}).items():
        argv += ["--fault", f"{key}={value}"]
    argv += extra or []
    async with _process(argv) as process:
        yield await _ready_url(process), process.pid


@contextlib.asynccontextmanager
async def mock_backend(
    model: str, ttft_ms: float = 20.0, itl_ms: float = 5.0
) -> AsyncIterator[tuple[str, int]]:
    """One ``python -m loadtests.mock_backend`` process (a cheap fixed-schedule streaming
    backend); yields (base url, pid)."""
    argv = [sys.executable, "-m", "loadtests.mock_backend", "--model", model]
    argv += ["--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)]
    async with _process(argv) as process:
        yield await _ready_url(process), process.pid


@contextlib.asynccontextmanager
async def direct_grpc_server(
    backend_url: str, engine: str = "grpcio"
) -> AsyncIterator[tuple[str, int]]:
    """One ``python -m loadtests.grpc_direct`` process (a bare gRPC door to ``backend_url``,
    served by ``engine``); yields (gRPC target ``host:port``, pid)."""
    argv = [sys.executable, "-m", "loadtests.grpc_direct", "--backend-url", backend_url]
    argv += ["--engine", engine]
    async with _process(argv) as process:
        yield await _ready_url(process), process.pid


# Public URL -> admin listener URL (gateway/admin: /metrics, state) of every gateway started.
ADMIN_URLS: dict[str, str] = {}


@contextlib.asynccontextmanager
async def gateway(
    config: Mapping[str, Any],
    workers: int = 1,
    env: Mapping[str, str] | None = None,
    launcher: Sequence[str] | None = None,
) -> AsyncIterator[tuple[str, int]]:
    """One ``meridian serve --config`` process on an ephemeral port (``--workers``: a
    supervisor and that many worker processes); yields (base url, pid). ``env``: the process's
    whole environment (e.g. a ``PYTHONPATH`` that runs another checkout's code). ``launcher``:
    the argv that runs ``meridian`` (default ``python -m gateway.cli``), e.g. one that counts
    the gateway's calls first (``loadtests/call_census.py``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gateway.yaml"
        path.write_text(yaml.safe_dump(dict(config)))
        argv = list(launcher or [sys.executable, "-m", "gateway.cli"])
        argv += ["serve", "--config", str(path), "--port", "0"]
        argv += ["--workers", str(workers)]
        async with _process(argv, env) as process:
            line = (await _readline(process)).decode()
            if not line.startswith("meridian listening on "):
                raise RuntimeError(f"unexpected first line from meridian serve: {line!r}")
            url = line.split()[-1]
            ADMIN_URLS[url] = (await _readline(process)).decode().split()[-1]
            yield url, process.pid
