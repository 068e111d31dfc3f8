"""Canary first tokens reach routing's learner (issue 14): with no client request at all, a
backend slower to its first token than configured is predicted slower once canaries saw it."""

from __future__ import annotations

import aiohttp

from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.servers import engine_admitted, scraped_sum


async def _predicted_ms(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(
        url + "/v1/meridian/route", params={"model": MODEL, "prompt": "hi"}
    ) as response:
        report = await response.json()
    return float(report["candidates"][0]["predicted_ttft_ms"])


async def test_canaries_teach_routing_without_any_request(emulator, gateway) -> None:
    slow = FAST_ENGINE.model_copy(update={"first_token_overhead_ms": 300.0})
    backend = await emulator("b1", engine=slow)
    config = config_for(
        {"b1": backend.url},
        signals={
            "tick_interval_s": 0.05,
            "probes": {"canary": {"enabled": True, "interval_s": 0.05}},
        },
    )
    running = await gateway(config)
    async with aiohttp.ClientSession() as session:
        # Bounded by canaries learned, not by time: a step of the offset is confirmed by a
        # few surprising samples in a row, a rate moves by a clipped step per sample.
        learned = after = 0.0
        while learned < 60 and after <= 220.0:
            learned = await scraped_sum(
                session, running.admin_url + "/metrics", "meridian_canaries_learned"
            )
            after = await _predicted_ms(session, running.url)
    # Canaries only reached the engine (this test sent no request). A canary stops reading at
    # its first token, so the engine may count it cancelled rather than completed.
    assert engine_admitted(backend) >= 1
    # Configuration alone predicts ~110 ms (10 ms overhead, the prefill, a step); the engine
    # takes 300 ms to its first token, and the canaries said so.
    assert after > 220.0, (learned, after)
