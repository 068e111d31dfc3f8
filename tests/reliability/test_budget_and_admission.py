"""Acceptance 8 (retry budget under a failing fleet) and 9 (admission control)."""

from __future__ import annotations

import asyncio
import time

import orjson

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    FAST_ENGINE,
    SETTLE_S,
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    engine_holds,
    post,
    wait_for,
)
from tests.servers import arrivals, settle

REQUESTS = 100


async def test_failing_fleet_gets_at_most_the_budgeted_extra_attempts(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    # retry_after_s=0: no Retry-After pause, so only the budget stands between the clients
    # and 3 attempts per request.
    faults = FaultConfig(unavailable_rate=1.0, retry_after_s=0)
    backends = {name: await emulator(name, faults=faults) for name in ("a", "b", "c")}
    config = config_for(
        {name: b.url for name, b in backends.items()},
        limits={"max_attempts": 3},
        retry={"budget_ratio": 0.2, "budget_burst": 5},
        signals={"outlier": {"enabled": False}},
    )
    running = await gateway(config)
    for _ in range(REQUESTS):  # a steady client rate: one request after another
        reply = await post(running.url, chat())
        assert reply.status == 503
        await asyncio.sleep(0.002)
    attempts = sum(b.stats.requests for b in backends.values())
    assert REQUESTS < attempts <= REQUESTS * 1.2 + 5, attempts
    assert running.app[RELAY].state.budget.denied > 0


async def test_admission_refuses_fast_with_retry_after_and_running_streams_finish(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    slow = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})
    backend = await emulator("b1", engine=slow)
    config = config_for(
        {"b1": backend.url},
        admission={
            "per_model": {"max_concurrent": 2, "max_queue": 1},
            "per_tenant": {"max_concurrent": 10, "max_queue": 0},
            "tenants": {"small": {"max_concurrent": 1, "max_queue": 0}},
            "queue_timeout_s": 60.0,  # far above any refusal time, however busy the machine
            "retry_after_s": 3,
        },
    )
    running = await gateway(config)
    body = chat(max_tokens=15)  # ~0.3 s each
    relay = running.app[RELAY]
    streams = [asyncio.ensure_future(post(running.url, body)) for _ in range(3)]
    # Two running (the engine holds them), one queued (in the gateway, not at the engine).
    await wait_for(lambda: engine_holds(backend) == 2 and relay.state.active == 3, SETTLE_S)
    started = time.perf_counter()
    refused = await post(running.url, body)
    took = time.perf_counter() - started
    # Refused at once, not after waiting out the 60 s queue timeout; the queued one still waits.
    assert refused.status == 503 and took < 30.0, (refused.status, took)
    assert relay.state.active == 3
    assert refused.headers["Retry-After"] == "3"
    assert orjson.loads(refused.body)["error"]["code"] == "model_overloaded"
    for reply in await asyncio.gather(*streams):  # the running ones and the queued one finish
        assert reply.status == 200 and reply.done and reply.tokens == 15
    # Per tenant: over its share is the tenant's problem, a 429.
    tenant = {"X-Meridian-Tenant": "small"}
    arrived = arrivals(backend)  # a finished stream may not have left the engine's count yet
    first = asyncio.ensure_future(post(running.url, body, headers=tenant))
    await settle(lambda: arrived() == 1)
    over = await post(running.url, body, headers=tenant)
    assert over.status == 429 and over.headers["Retry-After"] == "3"
    assert orjson.loads(over.body)["error"]["code"] == "tenant_over_limit"
    assert (await first).done
    assert backend.stats.requests == 4  # refused requests never reached the backend
