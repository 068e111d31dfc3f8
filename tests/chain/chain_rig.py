"""Real processes for the chain tests: ``meridian emulate`` and ``meridian serve`` gateways,
with a delay proxy in the test process standing for the distance between regions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from gateway.timing import TimingEntry, parse
from tests.acceptance.harness import MERIDIAN, Process, carries_token, start_gateway
from tests.servers import hang_bound

MODEL = "chain-model"
FAST_ENGINE = {
    "first_token_overhead_ms": 5.0,
    "decode_base_ms": 4.0,
    "decode_per_seq_ms": 0.0,
    "prefill_tokens_per_s": 1_000_000.0,
}
FAST_SIGNALS = {
    "probes": {"interval_s": 0.5, "timeout_s": 1.0},
    "engine_metrics": {"interval_s": 0.5, "timeout_s": 1.0},
}


def start_emulator(logs: Path, region: str, rtt_ms: float) -> tuple[Process, str]:
    argv = [*MERIDIAN, "emulate", "--backend", "b1", "--model", MODEL, "--region", region]
    argv += ["--rtt-ms", str(rtt_ms), "--port", "0"]
    for key, value in FAST_ENGINE.items():
        argv += ["--engine", f"{key}={value}"]
    process = Process(argv, logs / "emulate-b1.log")
    url = orjson.loads(process.readline())["url"]
    assert orjson.loads(process.readline()) == {"ready": True}
    return process, str(url)


def gateway_config(
    gateway_id: str, region: str, backends: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    regions = sorted({region, *(b["region"] for b in backends)})
    return {
        "region": region,
        "regions": [{"name": name, "rtt_ms": 1.0 if name == region else 20.0} for name in regions],
        "chain": {"id": gateway_id, "summary": {"interval_s": 0.2, "timeout_s": 0.5}},
        "backends": backends,
        "signals": FAST_SIGNALS,
        "timeouts": {"first_token_s": 10.0},
        **extra,
    }


def gateway_backend(name: str, region: str, url: str) -> dict[str, Any]:
    return {
        "name": name,
        "region": region,
        "kind": "gateway",
        "engine": "meridian",
        "url": url + "/v1",
        "models": [MODEL],
    }


@contextmanager
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def serve(config: dict[str, Any], workdir: Path, name: str, started: list[Process]) -> str:
    process, url = start_gateway(config, workdir, name)
    started.append(process)
    return url


@dataclass(frozen=True, slots=True)
class HttpReply:
    status: int
    timing: list[TimingEntry]
    client_ttft_ms: float | None
    comments: list[str]
    error: dict[str, Any] | None


async def chat(
    session: aiohttp.ClientSession, gateway: str, headers: dict[str, str] | None = None
) -> HttpReply:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
    }
    sent = time.perf_counter()
    async with session.post(
        f"{gateway}/v1/chat/completions", json=body, headers=headers or {}
    ) as resp:
        if resp.status != 200:
            error = (await resp.json()).get("error")
            return HttpReply(resp.status, [], None, [], error)
        first: float | None = None
        comments = []
        async for raw in resp.content:
            line = raw.strip()
            if first is None and carries_token(line):
                first = time.perf_counter()
            if line.startswith(b":"):
                comments.append(line.decode())
        timing = parse(resp.headers.get("Server-Timing", ""))
        ttft = None if first is None else (first - sent) * 1000.0
        return HttpReply(200, timing, ttft, comments, None)


async def wait_for_summary(
    session: aiohttp.ClientSession, gateway: str, check: Any, timeout_s: float = 10.0
) -> dict[str, Any]:
    """Poll a gateway's own summary until ``check(summary)`` holds."""
    deadline = time.monotonic() + hang_bound(timeout_s)
    summary: dict[str, Any] = {}
    while time.monotonic() < deadline:
        async with session.get(f"{gateway}/v1/meridian/summary") as resp:
            summary = await resp.json()
        if check(summary):
            return summary
        await asyncio.sleep(0.1)
    raise AssertionError(f"summary never got there: {summary}")


async def chat_whole(session: aiohttp.ClientSession, gateway: str) -> dict[str, Any]:
    """A non-streaming chat completion; returns its ``X-Meridian-Timing`` summary."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with session.post(f"{gateway}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        summary: dict[str, Any] = orjson.loads(resp.headers["X-Meridian-Timing"])
        return summary
