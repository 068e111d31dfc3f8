"""Acceptance 6: a client that leaves cancels the upstream within a second, and nothing leaks.

Every client leaves at an event, never after a pause of its own: a streaming client once its
first bytes came (mid-stream), a waiting client once the emulated engine holds its request (the
engine's running + waiting count). So every request is known to have reached an engine, and
every one must be cancelled there: the counts are exact, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from typing import Any

import aiohttp
import pytest

from gateway.config import GatewayConfig, parse_config
from gateway.opened_stream import OpenedStream
from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from loadtests.emulator.server import RunningEmulator
from tests.reliability.support import (
    FAST_ENGINE,
    SETTLE_S,
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_data,
    engine_holds,
    wait_for,
)
from tests.servers import leave_once_admitted, open_fds

SLOW = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})
STALLING = FaultConfig(stall_ms=60_000.0)  # no first token while the test runs
STALL_MODEL = "rel-stall-model"  # served by the stalling backend alone
PHASES = ("first_token", "mid_stream", "non_stream")


def _config(streaming: RunningEmulator, stalling: RunningEmulator) -> GatewayConfig:
    # No probes or metric scrapes: their keep-alive connections come and go on their own clock
    # and would blur the task and socket counts, which must then be the requests' alone.
    quiet_signals = {"probes": {"enabled": False}, "engine_metrics": {"enabled": False}}
    data = config_data({"b-stream": streaming.url}, signals=quiet_signals)
    data["backends"].append(
        {"name": "b-stall", "region": "local", "url": stalling.url + "/v1", "models": [STALL_MODEL]}
    )
    return parse_config(data, "<test>")


def _body(phase: str) -> dict[str, Any]:
    body = chat(stream=phase != "non_stream", max_tokens=300)
    if phase != "mid_stream":
        body["model"] = STALL_MODEL
    return body


async def _wait_forever(session: aiohttp.ClientSession, url: str, phase: str) -> None:
    """A request that gets no answer before its client leaves (the task is cancelled)."""
    async with session.post(url + "/v1/chat/completions", json=_body(phase)) as response:
        raise AssertionError(f"a stalled request was answered: {response.status}")


async def _leave_mid_stream(session: aiohttp.ClientSession, url: str) -> None:
    response = await session.post(url + "/v1/chat/completions", json=_body("mid_stream"))
    assert response.status == 200
    assert await response.content.readany()  # the first token is here; now leave
    response.close()


async def _leave(
    url: str, phases: list[str], stalling: RunningEmulator, session: aiohttp.ClientSession
) -> None:
    """One request per phase; returns once every client has left (the connection closed)."""
    await asyncio.gather(*(_leave_mid_stream(session, url) for p in phases if p == "mid_stream"))
    waiting = [_wait_forever(session, url, p) for p in phases if p != "mid_stream"]
    await leave_once_admitted(stalling, waiting)


@pytest.mark.parametrize("phase", PHASES)
async def test_disconnect_cancels_upstream_before_it_finishes(
    emulator: EmulatorFactory, gateway: GatewayFactory, phase: str
) -> None:
    stalling = await emulator("b-stall", engine=SLOW, faults=STALLING, models=(STALL_MODEL,))
    streaming = await emulator("b-stream", engine=SLOW)
    running = await gateway(_config(streaming, stalling))
    backend = streaming if phase == "mid_stream" else stalling
    async with aiohttp.ClientSession() as session:
        await _leave(running.url, [phase], stalling, session)
        await wait_for(lambda: backend.stats.cancelled == 1, SETTLE_S)
    # Cancelled, not run to its end (the emulator counts a request as one or the other). How
    # soon is a measurement, not a test's promise on a busy machine.
    assert backend.stats.completed == 0
    await wait_for(lambda: running.app[RELAY].fleet.in_flight(backend.config.name) == 0, SETTLE_S)


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
    stalling = await emulator("b-stall", engine=SLOW, faults=STALLING, models=(STALL_MODEL,))
    streaming = await emulator("b-stream", engine=SLOW)
    backends = {"b-stall": stalling, "b-stream": streaming}
    running = await gateway(_config(streaming, stalling))
    relay = running.app[RELAY]
    sent = 0

    async def wave(count: int) -> None:
        nonlocal sent
        async with aiohttp.ClientSession() as session:
            await _leave(running.url, [PHASES[i % 3] for i in range(count)], stalling, session)
        sent += count

    def cancelled() -> int:
        return sum(b.stats.cancelled for b in backends.values())

    async def quiet() -> None:
        """Every request cancelled at its engine and every count back to zero."""
        await wait_for(lambda: cancelled() == sent, SETTLE_S)
        await wait_for(lambda: all(relay.fleet.in_flight(n) == 0 for n in backends), SETTLE_S)
        await wait_for(lambda: all(engine_holds(b) == 0 for b in backends.values()), SETTLE_S)
        await wait_for(lambda: relay.state.active == 0 and relay.drain.in_flight == 0, SETTLE_S)

    await wave(60)  # warm up pools, caches and lazily built objects before the baseline
    await quiet()
    caplog.clear()
    gc.collect()
    baseline_tasks = set(asyncio.all_tasks())
    tasks, fds, rss = len(baseline_tasks), open_fds(), _rss_bytes()
    responses = _live(aiohttp.ClientResponse)
    for _ in range(20):
        await wave(50)
    await quiet()

    def released() -> bool:
        """Closing transports and finished handlers are collected within a few loop turns."""
        gc.collect()
        return (
            len(asyncio.all_tasks()) <= tasks
            and open_fds() <= fds + 4
            and _live(OpenedStream) == 0
            and _live(aiohttp.ClientResponse) <= responses
        )

    # Poll in this task (a helper task would count as one more) and let the asserts below
    # name what is still held if it never settles.
    with contextlib.suppress(AssertionError):
        await wait_for(released, SETTLE_S)
    # Every request reached an engine before its client left, and none ran to the end.
    assert sum(b.stats.completed for b in backends.values()) == 0
    assert cancelled() == sent == 1060
    new_tasks = [t.get_name() for t in asyncio.all_tasks() - baseline_tasks]
    assert len(asyncio.all_tasks()) <= tasks, f"tasks leaked: {new_tasks}"
    assert open_fds() <= fds + 4, f"sockets leaked: {fds} -> {open_fds()}"
    assert _live(OpenedStream) == 0
    assert _live(aiohttp.ClientResponse) <= responses
    assert relay.state.active == 0 and relay.drain.in_flight == 0
    growth = _rss_bytes() - rss
    assert growth < 16 * 1024 * 1024, f"memory grew by {growth / 1e6:.1f} MB"
