"""A gRPC port in use is one clear line naming that port and its setting, on either engine, with
one worker or several (where the supervisor reserves the port). It was reported under the HTTP
port, with advice to change ``--port`` (h2 workers), or as a traceback (grpcio)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.grpc.server import GrpcEngine
from tests.grpc.conftest import ENGINES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_grpc_port_in_use_is_one_clear_line(
    tmp_path: Path, engine: GrpcEngine, workers: int
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = {
            "listen": {"grpc_port": port, "grpc_engine": engine},
            "backends": [
                {"name": "b1", "region": "local", "url": "http://127.0.0.1:9/v1", "models": ["m"]}
            ],
        }
        path = tmp_path / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
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
