"""Admission before routing: a request waiting in the admission queue holds no backend
reservation, and is routed (on the snapshot of that moment) only once it is admitted."""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    FAST_ENGINE,
    MODEL,
    chat,
    config_for,
    metric_value,
    router_in_flight,
)
from tests.servers import emulators, engine_admitted, engine_holds, gateways, settle


async def _wait_on(session: aiohttp.ClientSession, url: str) -> None:
    async with session.post(url + "/v1/chat/completions", json=chat(max_tokens=4)) as response:
        raise AssertionError(f"answered before the client left: {response.status}")


async def test_a_queued_request_holds_no_reservation_until_admitted() -> None:
    async with emulators(MODEL, FAST_ENGINE) as make_emulator, gateways() as make_gateway:
        stall = await make_emulator("b1", faults=FaultConfig(stall_ms=600_000.0))
        admission = {
            "models": {MODEL: {"max_concurrent": 1, "max_queue": 1}},
            "queue_timeout_s": 600.0,
        }
        gateway = await make_gateway(
            config_for({"b1": stall.url}, admission=admission, timeouts={"first_token_s": 600.0})
        )
        relay = gateway.app[RELAY]

        def decisions() -> float:
            return metric_value(gateway, "meridian_route_decision_seconds_count")

        async with aiohttp.ClientSession() as session:
            holder = asyncio.ensure_future(_wait_on(session, gateway.url))
            await settle(lambda: engine_holds(stall) == 1)
            assert router_in_flight(relay.router, "b1") == 1
            queued = asyncio.ensure_future(_wait_on(session, gateway.url))
            await settle(lambda: relay.state.admission.held() == 2)  # one slot, one queued
            # Queued: not routed, so not counted against the backend it would go to.
            assert decisions() == 1
            assert router_in_flight(relay.router, "b1") == 1
            assert relay.state.active == 2 and relay.drain.in_flight == 2
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
            # The slot passes to the queued request: it is routed now and reaches the engine.
            await settle(lambda: engine_admitted(stall) == 2 and engine_holds(stall) == 1)
            assert decisions() == 2
            assert router_in_flight(relay.router, "b1") == 1
            queued.cancel()
            await asyncio.gather(queued, return_exceptions=True)
            await settle(lambda: relay.state.active == 0)
            assert router_in_flight(relay.router, "b1") == 0
            assert relay.state.admission.held() == 0
