"""Acceptance 5: hedging against a backend that stalls 5% of first tokens."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    EmulatorFactory,
    GatewayFactory,
    chat,
    config_for,
    percentile,
    wait_for,
)

REQUESTS = 120
STALL_MS = 800.0


async def _ttfts(url: str, concurrency: int = 12) -> list[float]:
    """Time to the first content byte of each of REQUESTS streams, in ms."""
    ttfts: list[float] = []
    queue = list(range(REQUESTS))

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            queue.pop()
            started = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", json=chat(max_tokens=4)) as r:
                assert r.status == 200
                await r.content.readany()
                ttfts.append((time.perf_counter() - started) * 1000.0)
                await r.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return ttfts


async def test_hedging_cuts_the_ttft_tail_within_budget_and_cancels_every_loser(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    faults = FaultConfig(stall_ms=STALL_MS, stall_rate=0.05)
    staller = await emulator("a-staller", faults=faults, seed=16)  # 9 stalls in 120
    # The second backend is 20 ms away, so the predicted-TTFT policy always ranks it second.
    spare = await emulator("b-far", rtt_ms=20.0)
    urls = {"a-staller": staller.url, "b-far": spare.url}
    regions = [{"name": "near", "rtt_ms": 0.0}, {"name": "far", "rtt_ms": 20.0}]
    backends = [
        {"name": n, "region": r, "url": u + "/v1", "models": ["rel-model"]}
        for (n, u), r in zip(urls.items(), ("near", "far"), strict=True)
    ]
    common = {"regions": regions, "backends": backends, "routing": {"policy": "predicted_ttft"}}
    plain = await gateway(config_for(urls, **common))
    baseline = await _ttfts(plain.url)
    async with aiohttp.ClientSession() as session:  # the same stalls again: reseed, recount
        for backend in (staller, spare):
            await session.post(backend.url + "/admin/reset")
    hedged_gw = await gateway(config_for(urls, **common, hedging={"enabled": True}))
    hedged = await _ttfts(hedged_gw.url)
    upstream = staller.stats.requests + spare.stats.requests
    extra = upstream - REQUESTS
    p99_plain, p99_hedged = percentile(baseline, 99), percentile(hedged, 99)
    assert p99_plain >= STALL_MS, "the baseline must see the stalls"
    assert p99_hedged * 4 < p99_plain, (p99_plain, p99_hedged)
    relay = hedged_gw.app[RELAY]
    assert 1 <= extra <= 0.2 * REQUESTS + relay.config.retry.budget_burst
    # Every hedge race had exactly one loser and none ran to the end: each was cancelled
    # upstream (the far one's cancellations during its RTT never reach its engine's counter).
    completed = staller.stats.completed + spare.stats.completed
    await wait_for(lambda: staller.stats.running + spare.stats.running == 0, 1.0)
    assert completed == REQUESTS
    assert staller.stats.cancelled >= 1  # the stalled first attempts lost to their hedges
    assert relay.fleet.in_flight("a-staller") == relay.fleet.in_flight("b-far") == 0
