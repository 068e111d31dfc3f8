"""When the gateway goes idle it brings routing up to date (``RelayState._refresh_routing``):
what a request's end changed (its backend's in-flight count in the signal hub, what routing
learned from it) is synced then, not by the next request's decision between its arrival and
its upstream write. Under load (a request still open) nothing extra is done."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gateway.app import RunningGateway
from gateway.state_keys import RELAY
from tests.reliability.support import (
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    post,
)
from tests.servers import settle

PREDICTED = {"policy": "predicted_ttft"}


def _routing_is_current(relay: Any) -> bool:
    """Nothing is left for the next decision to sync: no dirty row in the hub's snapshot, no
    estimate routing learned that its columns do not hold yet."""
    state, router = relay.state, relay.state.router
    return state.active == 0 and not state.fleet._dirty and not router.scorer.learner.dirty


@pytest.fixture
async def predicted(emulator: EmulatorFactory, gateway: GatewayFactory) -> RunningGateway:
    """A gateway routing one emulated backend with the predicted-TTFT policy."""
    backend = await emulator()
    return await gateway(config_for({"b1": backend.url}, routing=PREDICTED))


async def test_an_idle_gateway_has_routing_ready_for_the_next_request(
    predicted: RunningGateway,
) -> None:
    running, relay = predicted, predicted.app[RELAY]
    for _ in range(3):
        reply = await post(running.url, chat())
        assert reply.status == 200
        # The request's end dirtied its backend's row and taught routing; idle, the gateway
        # syncs both on the loop's next turn.
        await settle(lambda: _routing_is_current(relay))


async def test_a_request_that_ends_while_another_runs_leaves_the_sync_to_a_decision(
    predicted: RunningGateway,
) -> None:
    running, relay = predicted, predicted.app[RELAY]
    state = relay.state
    async with aiohttp.ClientSession() as session:
        long = await session.post(running.url + "/v1/chat/completions", json=chat(max_tokens=400))
        assert await long.content.readany()  # streaming: one request open
        reply = await post(running.url, chat())
        assert reply.status == 200
        await settle(lambda: state.active == 1)  # the short one ended, the long one runs
        # Its end dirtied its row and taught routing; the gateway was never idle: unsynced.
        router: Any = state.router
        assert state.fleet._dirty and router.scorer.learner.dirty
        long.close()
    await settle(lambda: _routing_is_current(relay))
