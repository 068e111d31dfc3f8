"""SSE comment keepalives while waiting for the first token (operator opts into early headers)."""

from __future__ import annotations

import aiohttp

from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    SETTLE_S,
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    post,
    wait_for,
)

STALL_S = 2.0  # the first token's delay: keepalives flow meanwhile
EARLY = {"early_headers": "when_waiting", "keepalive_s": 0.1}


async def test_keepalives_flow_while_waiting_then_one_clean_stream(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1", faults=FaultConfig(stall_ms=STALL_S * 1000.0))
    running = await gateway(config_for({"b1": backend.url}, streams=EARLY))
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/chat/completions", json=chat()) as response:
            answered_then = backend.stats.completed  # the emulator's own count, not a clock
            assert response.status == 200
            assert "X-Meridian-Route" not in response.headers  # not known when headers left
            text = (await response.read()).decode()
    assert answered_then == 0  # the headers came before the backend's answer
    events = [e for e in text.split("\n\n") if e]
    keepalives = [e for e in events if e == ": keepalive"]
    assert len(keepalives) >= 3
    first_data = next(i for i, e in enumerate(events) if e.startswith("data: "))
    assert all(e == ": keepalive" for e in events[: first_data - 1])
    assert events[first_data - 1].startswith(": meridian-route ") and "attempts=1" in text
    assert events[-1] == "data: [DONE]"


async def test_fast_first_token_keeps_held_headers(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, streams=EARLY))
    reply = await post(running.url, chat())
    assert reply.status == 200 and "backend=b1" in reply.headers["X-Meridian-Route"]
    assert b": keepalive" not in reply.body and reply.done


async def test_failure_after_early_headers_is_an_error_event(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    backend = await emulator("b1", faults=FaultConfig(stall_ms=5_000.0))
    config = config_for({"b1": backend.url}, streams=EARLY, timeouts={"first_token_s": 0.35})
    running = await gateway(config)
    reply = await post(running.url, chat())
    assert reply.status == 200
    assert [e["code"] for e in reply.errors()] == ["upstream_timeout"]
    assert not reply.done
    await wait_for(lambda: backend.stats.cancelled == 1, SETTLE_S)
