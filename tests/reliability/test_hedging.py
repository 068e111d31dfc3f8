"""Acceptance 5: hedging rescues a stalled first token, within budget, cancelling every loser.

What hedging does to the TTFT tail (p99 with and without it, against a backend that stalls 5%
of first tokens) is a measurement, and it lives in ``python -m loadtests.bench_hedging``: on a
busy machine the ratio of two p99s is a property of the machine as much as of the gateway.
This test checks what must hold whatever the load: the preferred backend never produces a
first token, so every request is rescued by exactly one hedge to the other backend, every
stalled loser is cancelled upstream, and the retry budget bounds the extra attempts.
"""

from __future__ import annotations

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    SETTLE_S,
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    engine_holds,
    wait_for,
)

REQUESTS = 12
NEVER = FaultConfig(stall_ms=600_000.0)  # the first token never comes while the test runs


async def test_hedging_cuts_the_ttft_tail_within_budget_and_cancels_every_loser(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    staller = await emulator("a-staller", faults=NEVER)
    # The second backend is 20 ms away, so the predicted-TTFT policy always ranks it second.
    spare = await emulator("b-far", rtt_ms=20.0)
    urls = {"a-staller": staller.url, "b-far": spare.url}
    regions = [{"name": "near", "rtt_ms": 0.0}, {"name": "far", "rtt_ms": 20.0}]
    backends = [
        {"name": n, "region": r, "url": u + "/v1", "models": ["rel-model"]}
        for (n, u), r in zip(urls.items(), ("near", "far"), strict=True)
    ]
    config = config_for(
        urls,
        regions=regions,
        backends=backends,
        routing={"policy": "predicted_ttft"},
        hedging={"enabled": True, "delay_ms": 50.0},
        # A first token that never comes is a cancelled attempt, not a timeout to learn from.
        timeouts={"first_token_s": 600.0},
        retry={"budget_ratio": 0.2, "budget_burst": REQUESTS},
    )
    running = await gateway(config)
    routes = []
    async with aiohttp.ClientSession() as session:
        for _ in range(REQUESTS):
            async with session.post(
                running.url + "/v1/chat/completions", json=chat(max_tokens=4)
            ) as reply:
                assert reply.status == 200
                routes.append(reply.headers["X-Meridian-Route"])
                assert b"[DONE]" in await reply.read()
    # Each was served by the spare; each that went to the stalled backend first (routing may
    # rank the spare first once the staller's queue shows) was won by its one hedge.
    assert all("backend=b-far" in r for r in routes), routes
    hedged = sum("attempts=2" in r and "hedges=1" in r for r in routes)
    assert hedged >= 1 and all("attempts=1" in r or "hedges=1" in r for r in routes), routes
    relay = running.app[RELAY]
    assert hedged <= 0.2 * REQUESTS + relay.config.retry.budget_burst  # the budget bounds them
    # Every stalled attempt lost and was cancelled upstream; none ran to the end. One that the
    # winner cancelled before its request reached the staller (a busy machine can delay the
    # send past the 50 ms hedge and the spare's answer) never arrives there: hence "at most".
    await wait_for(
        lambda: staller.stats.cancelled == staller.stats.requests and engine_holds(staller) == 0,
        SETTLE_S,
    )
    assert staller.stats.requests <= hedged, (routes, staller.stats.as_dict())
    await wait_for(lambda: engine_holds(spare) == 0, SETTLE_S)
    assert staller.stats.completed == 0
    assert spare.stats.requests == spare.stats.completed == REQUESTS
    # each backend's own count: the winner's book-keeping may end after the loser's
    await wait_for(lambda: relay.fleet.in_flight("a-staller") == 0, SETTLE_S)
    await wait_for(lambda: relay.fleet.in_flight("b-far") == 0, SETTLE_S)
