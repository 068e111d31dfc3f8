"""The proxies ``bench_peers`` compares Meridian with, as subprocesses in front of one backend.

- **LiteLLM proxy**: installed by this module into a virtual environment of its own
  (``python -m venv`` + ``pip install 'litellm[proxy]'``, once; the project never imports it),
  one worker, latency-based routing, as people run it.
- **nginx** (Debian's, ``apt-get install nginx-light``): a plain byte relay with buffering off,
  the floor for what relaying SSE costs. Not installed by this module; skipped when absent.
- **python-relay** (``loadtests/python_relay.py``): the same byte relay in Python on uvloop,
  doing nothing a gateway does: the floor for any Python relay on this host; and
  **aiohttp-relay**, the same behind aiohttp's web server (Meridian's HTTP door's server).

Each yields its base URL and the pid whose process tree's CPU time is charged to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import yaml

from loadtests.processes import stop_process

_READY_S = 120.0
DEFAULT_VENVS = Path.home() / ".cache" / "meridian-bench-peers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant (Linux /proc)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)
        cpu[child] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += cpu.get(current, 0.0)
        todo.extend(children.get(current, ()))
    return total


def litellm_python(venvs: Path, version: str | None) -> Path | None:
    """The LiteLLM venv's python, installing it first if needed; None if that fails."""
    venv = venvs / f"litellm-{version or 'latest'}"
    python = venv / "bin" / "python"
    if (venv / "bin" / "litellm").exists():
        return python
    spec = f"litellm[proxy]=={version}" if version else "litellm[proxy]"
    print(f"bench_peers: installing {spec} into {venv} (once)", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", spec], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"bench_peers: LiteLLM not installable here ({exc}); skipped", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        return None
    return python


async def _wait_http(url: str, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + _READY_S
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"{url}: the process exited with {process.returncode}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(url) as response:
                    if response.status < 500:
                        return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} not ready within {_READY_S:.0f}s")


@contextlib.asynccontextmanager
async def _running(argv: list[str], ready_url: str) -> AsyncIterator[int]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await _wait_http(ready_url, process)
        yield process.pid
    finally:
        await stop_process(process, grace_s=15)


@contextlib.asynccontextmanager
async def litellm_proxy(
    python: Path, backend_url: str, model: str
) -> AsyncIterator[tuple[str, int]]:
    """``litellm --config`` with one model on ``backend_url`` (OpenAI-compatible)."""
    config = {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": backend_url + "/v1",
                    "api_key": "unused",
                },
            }
        ],
        "router_settings": {"routing_strategy": "latency-based-routing"},
        "litellm_settings": {"telemetry": False, "drop_params": True},
        # Loopback only, and the load generator sends no key: without a master key LiteLLM
        # skips key checks, which only makes it faster than it runs with auth (conservative).
        "general_settings": {"dangerously_permit_weak_or_unset_master_key": True},
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "litellm.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        litellm = python.parent / "litellm"
        argv = [str(litellm), "--config", str(path), "--port", str(port), "--num_workers", "1"]
        url = f"http://127.0.0.1:{port}"
        async with _running(argv, url + "/health/liveliness") as pid:
            yield url, pid


def _nginx_conf(prefix: Path, port: int, backend_url: str) -> str:
    upstream = backend_url.removeprefix("http://")
    return f"""
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream backend {{ server {upstream}; keepalive 512; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_cache off;
        }}
    }}
}}
"""


@contextlib.asynccontextmanager
async def nginx_relay(backend_url: str) -> AsyncIterator[tuple[str, int]]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(_nginx_conf(prefix, port, backend_url))
        argv = [nginx, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"]
        url = f"http://127.0.0.1:{port}"
        async with _running(argv, url + "/v1/models") as pid:
            yield url, pid


@contextlib.asynccontextmanager
async def python_relay(
    backend_url: str, server: str = "protocol"
) -> AsyncIterator[tuple[str, int]]:
    """``loadtests/python_relay.py`` (``server``: ``protocol`` or ``aiohttp``)."""
    port = free_port()
    argv = [sys.executable, "-m", "loadtests.python_relay", "--backend", backend_url]
    argv += ["--port", str(port), "--server", server]
    url = f"http://127.0.0.1:{port}"
    async with _running(argv, url + "/v1/models") as pid:
        yield url, pid


def nginx_available() -> bool:
    return shutil.which("nginx") is not None or Path("/usr/sbin/nginx").exists()


@contextlib.contextmanager
def cpu_meter(pid: int | None) -> Iterator[list[float]]:
    """CPU seconds the process tree of ``pid`` used inside the block (appended on exit)."""
    spent: list[float] = []
    before = tree_cpu_s(pid) if pid else 0.0
    try:
        yield spent
    finally:
        spent.append(tree_cpu_s(pid) - before if pid else 0.0)
