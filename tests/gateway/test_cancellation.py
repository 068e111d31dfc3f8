"""A client that goes away cancels the upstream request, at every phase, and nothing leaks."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import EngineParams, FaultConfig
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.servers import leave_once_admitted
from tests.servers import settle as _wait_for

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        raise AssertionError(f"answered before the client left: {response.status}")


async def test_disconnect_while_waiting_for_first_token(emulator, gateway) -> None:
    backend = await emulator("b1", faults=FaultConfig(stall_ms=10_000.0))
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        await leave_once_admitted(backend, [_post(session, running.url, {**CHAT, "stream": True})])
    await _wait_for(lambda: backend.stats.cancelled == 1)
    await _wait_for(lambda: running.app[RELAY].fleet.in_flight("b1") == 0)


async def test_disconnect_mid_stream(emulator, gateway) -> None:
    engine = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})
    backend = await emulator("b1", engine=engine)
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            running.url + "/v1/chat/completions",
            json={**CHAT, "stream": True, "max_tokens": 500},
        )
        assert response.status == 200
        await response.content.readany()
        response.close()
    await _wait_for(lambda: backend.stats.cancelled == 1)
    assert backend.stats.completed == 0


async def test_disconnect_during_non_streaming_request(emulator, gateway) -> None:
    engine = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})
    backend = await emulator("b1", engine=engine)
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        await leave_once_admitted(
            backend, [_post(session, running.url, {**CHAT, "max_tokens": 500})]
        )
    await _wait_for(lambda: backend.stats.cancelled == 1)


async def test_many_disconnects_leak_no_tasks_or_connections(emulator, gateway) -> None:
    engine: EngineParams = FAST_ENGINE.model_copy(update={"decode_base_ms": 10.0})
    backend = await emulator("b1", engine=engine)
    # No probes or metric scrapes: the emulator's connections are then the requests' alone.
    quiet = {"probes": {"enabled": False}, "engine_metrics": {"enabled": False}}
    running = await gateway(config_for({"b1": backend.url}, signals=quiet))
    relay = running.app[RELAY]

    async def one(session: aiohttp.ClientSession, index: int) -> None:
        # 2,000 tokens at >= 10 ms a step: no answer can end (~20 s) before the gateway acts on
        # its client leaving, even on a slow machine; with 200 a loaded host let the engine
        # finish a few streams first, and the engine's cancel count came up short
        body = {**CHAT, "stream": index % 2 == 0, "max_tokens": 2000}
        if index % 2:  # non-streaming: leave while the engine generates the body
            await leave_once_admitted(backend, [_post(session, running.url, body)])
            return
        response = await session.post(running.url + "/v1/chat/completions", json=body)
        assert response.status == 200
        assert await response.content.readany()  # leave mid-stream
        response.close()

    async with aiohttp.ClientSession() as session:
        await one(session, 0)  # warm up pools before taking the baseline
    await _wait_for(lambda: relay.fleet.in_flight("b1") == 0, 2.0)
    gc.collect()
    baseline_tasks = len(asyncio.all_tasks())
    rounds = 200
    async with aiohttp.ClientSession() as session:
        for start in range(0, rounds, 20):
            await asyncio.gather(*(one(session, i) for i in range(start, start + 20)))
    await _wait_for(lambda: relay.fleet.in_flight("b1") == 0, 3.0)
    await _wait_for(lambda: backend.stats.running + backend.stats.waiting == 0, 3.0)
    await _wait_for(lambda: backend.stats.cancelled == rounds + 1)  # every one, at the engine
    # Every upstream connection was closed (none ran to the end to be reused): the emulator's
    # server holds no connection to the gateway any more.
    await _wait_for(lambda: backend.open_connections() == 0)
    gc.collect()
    # Handlers of requests abandoned while still in the socket buffer end a moment later:
    # wait for them; a leak would never settle.
    await _wait_for(lambda: len(asyncio.all_tasks()) <= baseline_tasks + 2)
