"""Two ``meridian serve`` processes sharing one Redis, in front of an emulated fleet served from
the test process. Everything is real: processes, sockets, redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from loadtests.emulator.config import EmulatedBackendConfig, EngineParams
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from loadtests.processes import stop_process
from tests.servers import hang_bound

MODEL = "replica-model"
BACKENDS = ("b1", "b2")
LEASE_PERIOD_S = 1.5
STATE_PATH = "/v1/meridian/state"
_READY_TIMEOUT_S = 30.0

# Fast engine (tests run quickly); the gateway believes in a slow prefill so that cached
# prefix tokens dominate its TTFT prediction.
FAST_ENGINE = EngineParams(
    prefill_tokens_per_s=2_000_000,
    decode_base_ms=5,
    decode_per_seq_ms=0,
    first_token_overhead_ms=1,
    max_num_seqs=512,
)


def state_section(where: dict[str, Any]) -> dict[str, Any]:
    """``where``: {"backend": "redis", "url": ...} or {"backend": "redis-cluster", "urls": [...]}."""
    return {
        **where,
        "key_prefix": f"r{uuid.uuid4().hex[:10]}",
        "timeouts": {"op_s": 0.2, "connect_s": 0.3, "breaker_failures": 2, "breaker_reset_s": 0.3},
        "intervals": {
            "flush_s": 0.02,
            "refresh_s": 0.3,
            "lease_period_s": LEASE_PERIOD_S,
            "in_flight_ttl_s": 2.0,
        },
    }


def gateway_config(fleet: Sequence[RunningEmulator], state: dict[str, Any]) -> dict[str, Any]:
    return {
        "region": "r1",
        "regions": [{"name": "r1", "rtt_ms": 1.0}],
        "backends": [
            {
                "name": emu.config.name,
                "region": "r1",
                "url": emu.url + "/v1",
                "models": [MODEL],
                "engine": "vllm",
                "capacity": {"prefill_tokens_per_s": 5000, "first_token_overhead_ms": 5},
            }
            for emu in fleet
        ],
        # Learning barely moves: the first backend to serve must not win every later choice
        # on a learned bias, so first turns spread and affinity is what the test sees.
        "routing": {"params": {"learning_rate": 1e-6, "bias_learning_rate": 1e-6}},
        "signals": {
            "probes": {"interval_s": 0.2, "jitter": 0.1, "measure_fresh": False},
            "engine_metrics": {"interval_s": 0.3, "jitter": 0.1},
        },
        "state": state,
    }


@dataclass
class Replica:
    url: str
    process: asyncio.subprocess.Process
    log: Path
    admin_url: str  # gateway/admin: state, metrics, readiness details

    @property
    def pid(self) -> int:
        return self.process.pid

    async def state(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        async with session.get(self.admin_url + STATE_PATH) as response:
            assert response.status == 200, await response.text()
            body: dict[str, Any] = await response.json()
            return body

    def kill(self) -> None:
        """SIGKILL: a crash, no goodbye (leases and counts are left to expire)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _write_config(config: dict[str, Any], workdir: Path, name: str) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, workdir / f"{name}.log"


@contextlib.asynccontextmanager
async def serve(config: dict[str, Any], workdir: Path, name: str) -> AsyncIterator[Replica]:
    """``meridian serve --config`` in its own process; its log goes to ``workdir/name.log``."""
    path, log = _write_config(config, workdir, name)
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"]
    argv += ["--workers", "1"]  # one process per replica: these tests count processes
    with open(log, "wb") as stderr:  # noqa: ASYNC230 - opening a local file, once
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), _READY_TIMEOUT_S)
        text = line.decode()
        if not text.startswith("meridian listening on "):
            raise RuntimeError(f"{name} did not start ({text!r}); see {log}")
        admin = (await asyncio.wait_for(process.stdout.readline(), _READY_TIMEOUT_S)).decode()
        yield Replica(text.split()[-1], process, log, admin.split()[-1])
    finally:
        await stop_process(process)


@dataclass
class Tier:
    fleet: list[RunningEmulator]
    replicas: list[Replica]
    session: aiohttp.ClientSession
    config: dict[str, Any] = field(default_factory=dict)

    async def states(self) -> list[dict[str, Any]]:
        return [await r.state(self.session) for r in self.replicas]


@contextlib.asynccontextmanager
async def tier(
    workdir: Path, where: dict[str, Any], engine: EngineParams = FAST_ENGINE
) -> AsyncIterator[Tier]:
    """Emulated fleet (in this process), then two replicas started one after the other (so
    the first one takes every probe lease), each answering on the state route."""
    fleet = [
        await start_emulated_backend(EmulatedBackendConfig(name=b, models=[MODEL], engine=engine))
        for b in BACKENDS
    ]
    config = gateway_config(fleet, state_section(where))
    try:
        async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:
            replicas = []
            for index in (1, 2):
                # Own seeds: with one seed, two replicas draw the same tie-breaks in step, and
                # agree on a backend by chance rather than by what they share.
                own = {**config, "routing": {**config["routing"], "seed": index}}
                replica = await stack.enter_async_context(serve(own, workdir, f"gw{index}"))
                replicas.append(replica)
                await wait_for(functools.partial(_in_sync, replica, session), 10.0)
            yield Tier(fleet, replicas, session, config)
    finally:
        for emu in fleet:
            await emu.close()


async def _in_sync(replica: Replica, session: aiohttp.ClientSession) -> bool:
    state = await replica.state(session)
    return bool(state["health"]["status"] == "ok")


async def wait_for(
    check: Callable[[], Awaitable[bool]], within_s: float, step_s: float = 0.05
) -> float:
    """Poll ``check`` until true; returns the time it took. Fails after ``within_s`` (never
    before tests.servers.HANG_BOUND_S: a hang detector, not a timing claim)."""
    started = time.monotonic()
    within_s = hang_bound(within_s)
    while not await check():
        if time.monotonic() - started > within_s:
            raise AssertionError(f"condition not met within {within_s}s")
        await asyncio.sleep(step_s)
    return time.monotonic() - started


def chat_body(messages: list[dict[str, str]], max_tokens: int, stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": stream}


async def chat(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, str]], max_tokens: int = 4
) -> tuple[int, str | None, float]:
    """One non-streamed chat completion: (status, backend that served, seconds taken)."""
    started = time.perf_counter()
    async with session.post(
        url + "/v1/chat/completions", json=chat_body(messages, max_tokens, False)
    ) as response:
        await response.read()
        return response.status, backend_of(response), time.perf_counter() - started


async def explain(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, str]]
) -> dict[str, Any]:
    """The replica at ``url``'s route explanation for this chat (nothing reserved or learned)."""
    body = chat_body(messages, 4, False)
    async with session.post(url + "/v1/meridian/route", json=body) as response:
        assert response.status == 200, await response.text()
        report: dict[str, Any] = await response.json()
        return report


def backend_of(response: aiohttp.ClientResponse) -> str | None:
    route = response.headers.get("X-Meridian-Route", "")
    for part in route.split(";"):
        key, _, value = part.strip().partition("=")
        if key == "backend":
            return value
    return None


@dataclass(frozen=True, slots=True)
class Sample:
    started: float  # monotonic
    seconds: float
    status: int | None  # None: the request raised (connection error, timeout)


class LoadRun:
    """Closed-loop load through both replicas in turn: ``workers`` clients, each sending short
    non-streamed chats back to back with ``pause_s`` between them."""

    def __init__(self, t: Tier, workers: int = 2, pause_s: float = 0.01) -> None:
        self._t = t
        self._workers = workers
        self._pause_s = pause_s
        self.samples: list[Sample] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> LoadRun:
        self._tasks = [asyncio.create_task(self._worker(i)) for i in range(self._workers)]
        return self

    async def answered(self, more: int) -> None:
        """Wait until ``more`` requests beyond those already answered have been answered: the
        test moves on events of the load, not on how many a busy machine fits in a second."""
        target = len(self.samples) + more

        async def reached() -> bool:
            return len(self.samples) >= target

        await wait_for(reached, 60.0)

    async def stop(self) -> list[Sample]:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return self.samples

    async def _worker(self, worker: int) -> None:
        messages = [{"role": "user", "content": f"worker {worker} says hello"}]
        turn = 0
        while True:
            replica = self._t.replicas[(worker + turn) % len(self._t.replicas)]
            turn += 1
            started = time.monotonic()
            try:
                status, _, seconds = await chat(self._t.session, replica.url, messages)
            except (aiohttp.ClientError, TimeoutError):
                status, seconds = None, time.monotonic() - started
            self.samples.append(Sample(started, seconds, status))
            await asyncio.sleep(self._pause_s)


def p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
