"""Helpers for the stream-reliability tests: configs, SSE reading, polling, subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from gateway.app import RunningGateway
from gateway.config import GatewayConfig, parse_config
from gateway.state_keys import METRICS
from loadtests.emulator.config import EngineParams
from routing.pipeline.router import PipelineRouter
from tests.servers import EmulatorFactory as EmulatorFactory  # re-exported for annotations
from tests.servers import GatewayFactory as GatewayFactory
from tests.servers import engine_holds as engine_holds
from tests.servers import refusing_port, settle

MODEL = "rel-model"
FAST_ENGINE = EngineParams(
    decode_base_ms=2.0,
    decode_per_seq_ms=0.0,
    first_token_overhead_ms=1.0,
    prefill_tokens_per_s=1_000_000.0,
    default_output_tokens=8,
)
# A ceiling for waits on conditions that come true in milliseconds: generous, so a busy
# machine cannot fail a test by its own timing; a test that hits it has found a real hang.
SETTLE_S = 30.0
# Fallback order must be predictable: round-robin's first turn goes to the first name.
ROUND_ROBIN = {"policy": "round_robin"}


def chat(stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
        **extra,
    }


def config_data(urls: dict[str, str], **overrides: Any) -> dict[str, Any]:
    backends = [
        {"name": name, "region": "local", "url": url + "/v1", "models": [MODEL]}
        for name, url in urls.items()
    ]
    data: dict[str, Any] = {
        "backends": backends,
        "routing": ROUND_ROBIN,
        "timeouts": {"first_token_s": 5.0},
    }
    data.update(overrides)
    return data


def config_for(urls: dict[str, str], **overrides: Any) -> GatewayConfig:
    return parse_config(config_data(urls, **overrides), "<test>")


def closed_port() -> int:
    return refusing_port()


def carries_token(data: bytes) -> bool:
    """A chunk with generated text (the role chunk's empty content does not count)."""
    return (b'"content":"' in data and b'"content":""' not in data) or b'"text":"' in data


@dataclass
class SseReply:
    status: int
    headers: dict[str, str]
    events: list[bytes] = field(default_factory=list)  # each event's text, no trailing blank line
    body: bytes = b""

    @property
    def data(self) -> list[bytes]:
        return [e[6:] for e in self.events if e.startswith(b"data: ")]

    @property
    def tokens(self) -> int:
        return sum(1 for d in self.data if carries_token(d))

    @property
    def done(self) -> bool:
        return b"[DONE]" in self.data

    def errors(self) -> list[dict[str, Any]]:
        out = []
        for d in self.data:
            if d.startswith(b"{") and b'"error"' in d:
                obj = orjson.loads(d)
                if isinstance(obj, dict) and "error" in obj:
                    out.append(obj["error"])
        return out


async def post(url: str, body: dict[str, Any], **kwargs: Any) -> SseReply:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body, **kwargs) as response:
            raw = await response.read()
            reply = SseReply(response.status, dict(response.headers), body=raw)
    if reply.headers.get("Content-Type", "").startswith("text/event-stream"):
        reply.events = [e for e in raw.split(b"\n\n") if e]
    return reply


async def wait_for(predicate: Callable[[], bool], within: float = 1.0) -> float:
    """Poll until ``predicate()``; returns how long it took, fails after ``within`` seconds."""
    return await settle(predicate, within)


def metric_value(running: RunningGateway, name: str, labels: dict[str, str] | None = None) -> float:
    """A sample of the gateway's registry, as a scrape would read it (0.0 when absent)."""
    value = running.app[METRICS].registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def router_in_flight(router: object, backend: str) -> int:
    """The router's open reservations on ``backend`` (its anti-herding in-flight count)."""
    if not isinstance(router, PipelineRouter):
        raise TypeError(f"expected the gateway's own PipelineRouter, got {type(router).__name__}")
    return router.ledger.open_count(backend, time.monotonic())


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


@dataclass
class ServeProcess:
    process: asyncio.subprocess.Process
    url: str
    log_path: Path
    admin_url: str  # gateway/admin: state, metrics, readiness details

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)


@contextlib.asynccontextmanager
async def serve_process(
    config_path: Path, launcher: list[str] | None = None
) -> AsyncIterator[ServeProcess]:
    """``meridian serve --config`` as a real process; its log goes to a file beside the config.
    ``launcher``: the argv that runs ``meridian`` (default ``python -m gateway.cli``), e.g. one
    that arms a probe first (``tests/reliability/gc_probe.py``)."""
    log_path = config_path.with_suffix(".log")
    argv = [*(launcher or [sys.executable, "-m", "gateway.cli"]), "serve"]
    argv += ["--config", str(config_path)]
    argv += ["--workers", "1"]  # the process under test is the gateway itself
    with log_path.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            *argv, "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=log_file,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            if not line.startswith(b"meridian listening on "):
                raise RuntimeError(
                    f"meridian serve did not start: {line!r}\n{log_path.read_text()}"
                )
            admin = await asyncio.wait_for(process.stdout.readline(), 30)
            yield ServeProcess(
                process, line.decode().split()[-1], log_path, admin.decode().split()[-1]
            )
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


def write_config(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data))
    tmp.replace(path)  # atomic: a watcher never reads half a file
