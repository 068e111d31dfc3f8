"""A backend's upstream client closed under live requests (a reload retiring it, shutdown)
fails them at once: one waiting for its first token gets an error status, one mid-stream an
error event — never a request left waiting forever on a reader nobody will wake (aiohttp drops
a closed connection's payload without failing it), which is what hung the reload test's
teardown for two minutes when it failed."""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import SETTLE_S, chat, config_for, engine_holds
from tests.servers import settle


async def test_closing_a_client_fails_its_waiting_and_streaming_requests(emulator, gateway) -> None:
    stalled = await emulator("b1", faults=FaultConfig(stall_ms=600_000.0))
    running = await gateway(config_for({"b1": stalled.url}, timeouts={"first_token_s": 600.0}))
    relay = running.app[RELAY]
    url = running.url + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        waiting = asyncio.ensure_future(session.post(url, json=chat()))
        await settle(lambda: engine_holds(stalled) == 1)
        async with asyncio.timeout(SETTLE_S):  # a ceiling against the hang, not a timing claim
            await relay.state.pool["b1"].close()
            response = await waiting
            assert response.status in (502, 503)
            assert b"upstream client was closed" not in await response.read()  # no internals
    await settle(lambda: relay.state.active == 0 and relay.drain.in_flight == 0)


async def test_closing_a_client_breaks_a_running_stream_with_an_error_event(
    emulator, gateway
) -> None:
    slow = await emulator("b1")
    running = await gateway(config_for({"b1": slow.url}))
    relay = running.app[RELAY]
    url = running.url + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=chat(max_tokens=20_000)) as response:
            assert response.status == 200
            first = await response.content.readany()
            assert first, first
            async with asyncio.timeout(SETTLE_S):
                await relay.state.pool["b1"].close()
                rest = await response.read()
    assert b"upstream_disconnected" in rest and b"[DONE]" not in rest, (first, rest)
    await settle(lambda: relay.state.active == 0 and relay.drain.in_flight == 0)
