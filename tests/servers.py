"""In-process servers on loopback ephemeral ports, closed when the test ends: emulated backends
and gateways. Test packages wrap these in their own fixtures with their own model and engine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import RunningGateway, start_gateway
from gateway.config import GatewayConfig
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend

_REFUSING: list[socket.socket] = []  # bound for the whole test run: no one else gets the port


def refusing_port() -> int:
    """A loopback port that refuses every connection while the tests run: bound, never
    listening. (A port closed after binding could be handed to another server meanwhile.)"""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _REFUSING.append(sock)
    return int(sock.getsockname()[1])


def unanswering_port() -> int:
    """A loopback port whose TCP handshakes never complete while the tests run: it listens
    with an accept queue of one, filled and never accepted, so the kernel drops every further
    SYN (the client stays in SYN_SENT, as with a host that is down or a firewall that drops)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = socket.create_connection(listener.getsockname(), timeout=10)
    _REFUSING.extend((listener, filler))
    return int(listener.getsockname()[1])


def open_fds() -> int:
    """File descriptors this test process holds now (sockets among them)."""
    return len(os.listdir("/proc/self/fd"))


def engine_holds(backend: RunningEmulator) -> int:
    """Requests an emulated engine holds now: admitted, stalled or generating."""
    return backend.stats.running + backend.stats.waiting


def engine_admitted(backend: RunningEmulator) -> int:
    """Requests that ever reached the emulated engine: a count that only grows."""
    stats = backend.stats
    return engine_holds(backend) + stats.cancelled + stats.completed + stats.errors


def arrivals(backend: RunningEmulator) -> Callable[[], int]:
    """Requests that reach ``backend``'s engine from now on. Wait on this, not on
    ``engine_holds(...) == 1``, for "my next request got there": the engine may still hold an
    earlier request whose client already left (it notices the closed connection later)."""
    before = engine_admitted(backend)
    return lambda: engine_admitted(backend) - before


# Every polling helper of the suite fails a test only after at least this long. The bound a
# call site passes says how soon the condition holds on a quiet machine; with the machine at
# load 8 (a suite series beside other work), 1-3 s bounds were reached by conditions that did
# hold a moment later. A bound is a hang detector, never a timing claim: waiting longer costs
# nothing when the condition holds, and a timing claim is a benchmark in loadtests/.
HANG_BOUND_S = 20.0


# A child process that starts Python and imports the gateway (or winds down) before a test can
# go on: a hang guard sized for a slow machine (at a load of 20 such a start took over 10 s).
PROCESS_BOUND_S = 60.0


def hang_bound(within_s: float) -> float:
    """The seconds a poll may take before it fails the test: ``within_s``, or the floor."""
    return max(within_s, HANG_BOUND_S)


async def scraped_sum(
    session: aiohttp.ClientSession, metrics_url: str, family: str, suffix: str = "_total"
) -> float:
    """The sum of every sample of counter ``family`` (its ``_total`` samples; a histogram's
    observations: ``suffix="_count"``) that ``metrics_url`` (a /metrics page) serves now."""
    async with session.get(metrics_url) as reply:
        text = await reply.text()
    return sum(
        sample.value
        for found in text_string_to_metric_families(text)
        if found.name == family
        for sample in found.samples
        if sample.name.endswith(suffix)
    )


def post_bytes(host: str, path: str, body: bytes, *, close: bool = False) -> bytes:
    """One HTTP/1.1 POST of a JSON ``body``, as the bytes a hand-driven client writes (to hang
    up, stall or pipeline exactly where a test wants)."""
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "")
    return (head + "\r\n").encode() + body


async def settle(
    predicate: Callable[[], bool], within_s: float = 30.0, step_s: float = 0.005
) -> float:
    """Poll until ``predicate()`` (every ``step_s``); returns how long it took. ``within_s``
    is a ceiling against hangs, not a timing claim: it fails the test when reached (never
    before HANG_BOUND_S)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    within_s = hang_bound(within_s)
    while not predicate():
        if loop.time() - start > within_s:
            raise AssertionError(f"condition not met within {within_s:.1f}s")
        await asyncio.sleep(step_s)
    return loop.time() - start


async def leave_once_admitted(
    backend: RunningEmulator, requests: Sequence[Awaitable[object]]
) -> None:
    """Start ``requests`` (each answered only after its client left: a stall, a long body),
    wait until ``backend``'s engine has admitted every one, then leave: the client tasks
    are cancelled, which closes their connections."""
    before = engine_admitted(backend)
    tasks = [asyncio.ensure_future(request) for request in requests]
    try:
        await settle(
            lambda: engine_admitted(backend) >= before + len(tasks) or any(t.done() for t in tasks)
        )
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if not isinstance(result, asyncio.CancelledError):
            raise AssertionError(f"a request was answered before its client left: {result!r}")


EmulatorFactory = Callable[..., Awaitable[RunningEmulator]]
GatewayFactory = Callable[..., Awaitable[RunningGateway]]


@contextlib.asynccontextmanager
async def emulators(
    model: str, default_engine: EngineParams, default_name: str = "b1"
) -> AsyncIterator[EmulatorFactory]:
    started: list[RunningEmulator] = []

    async def make(
        name: str = default_name,
        *,
        engine: EngineParams = default_engine,
        faults: FaultConfig | None = None,
        **kwargs: Any,
    ) -> RunningEmulator:
        config = EmulatedBackendConfig(
            name=name,
            models=kwargs.pop("models", (model,)),
            engine=engine,
            faults=faults or FaultConfig(),
            **kwargs,
        )
        running = await start_emulated_backend(config)
        started.append(running)
        return running

    try:
        yield make
    finally:
        for running in started:
            await running.close()


@contextlib.asynccontextmanager
async def gateways() -> AsyncIterator[GatewayFactory]:
    started: list[RunningGateway] = []

    async def make(config: GatewayConfig) -> RunningGateway:
        running = await start_gateway(config, "127.0.0.1", 0)
        started.append(running)
        return running

    try:
        yield make
    finally:
        for running in started:
            await running.close()


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """A scripted aiohttp app (an upstream that replays bytes) on a loopback port: its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
