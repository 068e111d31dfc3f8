"""A client that goes away cancels the upstream request, at every phase, and nothing leaks."""

from __future__ import annotations

import asyncio
import contextlib
import gc

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import EngineParams, FaultConfig
from tests.gateway.support import FAST_ENGINE, MODEL, config_for

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


async def _wait_for(predicate, within: float = 1.0) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        if loop.time() - start > within:
            raise AssertionError(f"condition not met within {within:.1f}s")
        await asyncio.sleep(0.01)
    return loop.time() - start


async def test_disconnect_while_waiting_for_first_token(emulator, gateway) -> None:
    backend = await emulator("b1", faults=FaultConfig(stall_ms=10_000.0))
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                session.post(running.url + "/v1/chat/completions", json={**CHAT, "stream": True}),
                0.3,
            )
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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                session.post(
                    running.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 500}
                ),
                0.3,
            )
    await _wait_for(lambda: backend.stats.cancelled == 1)


async def test_many_disconnects_leak_no_tasks_or_connections(emulator, gateway) -> None:
    engine: EngineParams = FAST_ENGINE.model_copy(update={"decode_base_ms": 10.0})
    backend = await emulator("b1", engine=engine)
    running = await gateway(config_for({"b1": backend.url}))
    relay = running.app[RELAY]

    async def one(session: aiohttp.ClientSession, index: int) -> None:
        body = {**CHAT, "stream": index % 2 == 0, "max_tokens": 200}
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                session.post(running.url + "/v1/chat/completions", json=body), 0.03
            )

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
    gc.collect()
    # Requests the client gave up on while still in the socket buffer are read (and refused)
    # a moment later: wait for their handlers to end; a leak would never settle.
    await _wait_for(lambda: len(asyncio.all_tasks()) <= baseline_tasks + 2, 5.0)
    session = relay.pool["b1"]._session
    assert session is not None
    connector = session.connector
    assert connector is not None
    assert len(connector._acquired) == 0  # every upstream connection was released or closed
