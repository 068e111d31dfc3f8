"""Acceptance 6: a client that leaves cancels the upstream within a second, and nothing leaks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time

import aiohttp
import pytest

from gateway.state_keys import RELAY
from gateway.stream import OpenedStream
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    FAST_ENGINE,
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    wait_for,
)

SLOW = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})


async def _leave(url: str, phase: str, session: aiohttp.ClientSession, after_s: float) -> None:
    """One request the client abandons in ``phase``: first_token, mid_stream, or non_stream."""
    body = chat(stream=phase != "non_stream", max_tokens=300)
    if phase == "mid_stream":
        response = await session.post(url + "/v1/chat/completions", json=body)
        assert response.status == 200
        await response.content.readany()
        response.close()
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(session.post(url + "/v1/chat/completions", json=body), after_s)
        raise AssertionError("the request was expected to outlast the client's patience")


@pytest.mark.parametrize("phase", ["first_token", "mid_stream", "non_stream"])
async def test_disconnect_cancels_upstream_within_a_second(
    emulator: EmulatorFactory, gateway: GatewayFactory, phase: str
) -> None:
    faults = FaultConfig(stall_ms=10_000.0) if phase == "first_token" else FaultConfig()
    backend = await emulator("b1", engine=SLOW, faults=faults)
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        await _leave(running.url, phase, session, 0.2)
    left_at = time.monotonic()
    await wait_for(lambda: backend.stats.cancelled == 1, 1.0)
    assert time.monotonic() - left_at < 1.0
    assert backend.stats.completed == 0
    await wait_for(lambda: running.app[RELAY].fleet.in_flight("b1") == 0, 1.0)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _live(kind: type) -> int:
    # type(), not isinstance(): lazy proxies (the openai SDK's) import modules on __class__.
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


async def test_a_thousand_disconnects_leak_no_tasks_sockets_or_memory(
    emulator: EmulatorFactory, gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # The emulator's server logs each write to a gone client with its traceback; captured
    # records would keep those frames (and their sockets) alive and look like a leak.
    caplog.set_level(logging.CRITICAL, "aiohttp.server")
    stalling = await emulator("b-stall", engine=SLOW, faults=FaultConfig(stall_ms=10_000.0))
    streaming = await emulator("b-stream", engine=SLOW)
    backends = {"b-stall": stalling, "b-stream": streaming}
    running = await gateway(config_for({name: b.url for name, b in backends.items()}))
    relay = running.app[RELAY]
    phases = ("first_token", "mid_stream", "non_stream")

    async def wave(count: int) -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(
                *(_leave(running.url, phases[i % 3], session, 0.05) for i in range(count))
            )

    async def quiet() -> None:
        await wait_for(lambda: all(relay.fleet.in_flight(n) == 0 for n in backends), 3.0)
        await wait_for(lambda: all(b.stats.running + b.stats.waiting == 0 for b in backends.values()), 3.0)  # fmt: skip
        await asyncio.sleep(0.1)  # closing transports finish on the next loop turns
        gc.collect()

    await wave(60)  # warm up pools, caches and lazily built objects before the baseline
    await quiet()
    caplog.clear()
    tasks, fds, rss = len(asyncio.all_tasks()), _open_fds(), _rss_bytes()
    responses = _live(aiohttp.ClientResponse)
    for _ in range(20):
        await wave(50)
    await quiet()
    # None ran to the end; a few left before their request reached an engine at all.
    assert sum(b.stats.completed for b in backends.values()) == 0
    assert sum(b.stats.cancelled for b in backends.values()) >= 900
    assert len(asyncio.all_tasks()) <= tasks, "tasks leaked"
    assert _open_fds() <= fds + 4, f"sockets leaked: {fds} -> {_open_fds()}"
    assert _live(OpenedStream) == 0
    assert _live(aiohttp.ClientResponse) <= responses
    assert relay.state.active == 0 and relay.drain.in_flight == 0
    growth = _rss_bytes() - rss
    assert growth < 16 * 1024 * 1024, f"memory grew by {growth / 1e6:.1f} MB"
