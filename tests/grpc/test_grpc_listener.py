"""The gRPC listener as ``meridian serve`` opens it, on either engine, with one worker or several
(where the supervisor reserves the port): bound where ``--host`` says, as the HTTP listener is
(it stayed on ``listen.host``), and a port in use is one clear line naming that port and its
setting (it was reported under the HTTP port, with advice to change ``--port``, or as a
traceback)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.grpc.server import GrpcEngine
from tests.grpc.conftest import ENGINES

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, engine: GrpcEngine, grpc_port: int) -> Path:
    config = {
        "listen": {"host": "127.0.0.1", "grpc_port": grpc_port, "grpc_engine": engine},
        "backends": [
            {"name": "b1", "region": "local", "url": "http://127.0.0.1:9/v1", "models": ["m"]}
        ],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("engine", ENGINES)
async def test_the_grpc_listener_binds_where_host_says(
    tmp_path: Path, engine: GrpcEngine, workers: int
) -> None:
    argv = ["serve", "--config", str(_config(tmp_path, engine, 0)), "--host", "127.0.0.2"]
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "gateway.cli", *argv, "--port", "0", "--workers", str(workers)],
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        lines = [(await asyncio.wait_for(process.stdout.readline(), 60)).decode() for _ in "123"]
        assert lines[0].startswith("meridian listening on http://127.0.0.2:"), lines
        assert lines[2].startswith("meridian grpc on 127.0.0.2:"), lines
        async with grpc.aio.insecure_channel(lines[2].split()[-1]) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 60)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_grpc_port_in_use_is_one_clear_line(
    tmp_path: Path, engine: GrpcEngine, workers: int
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = _config(tmp_path, engine, port)
        argv = ["serve", "--config", str(path), "--port", "0", "--workers", str(workers)]
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", *argv, "--log-level", "ERROR"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"meridian serve: cannot listen on 127.0.0.1:{port}: address already in use"
        " (change listen.grpc_port)"
    )
    assert done.stdout == ""  # never said it was listening
