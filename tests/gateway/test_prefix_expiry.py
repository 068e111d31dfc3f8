"""The router's prefix index is swept of expired entries in the background (issue 19): a
gateway's memory does not carry dead prefixes until the size bound forces them out."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.support import MODEL, config_for


async def _samples(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("meridian_prefix_index")
        for sample in family.samples
    }


async def test_expired_prefixes_leave_the_index_without_any_request(emulator, gateway) -> None:
    backend = await emulator("b1")
    config = config_for(
        {"b1": backend.url},
        routing={
            "policy": "predicted_ttft",
            "params": {"prefix_ttl_s": 0.2},
            "prefix_sweep_interval_s": 0.05,
        },
    )
    running = await gateway(config)
    system = "You are a careful assistant who answers in one short sentence. " * 8
    async with aiohttp.ClientSession() as session:
        for turn in range(5):
            body = {
                "model": MODEL,
                "max_tokens": 2,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"question number {turn} " * 10},
                ],
            }
            async with session.post(running.url + "/v1/chat/completions", json=body) as reply:
                assert reply.status == 200
                await reply.read()
        # Synchronised on the sweep's own counters; the test's timeout bounds the wait.
        while True:
            samples = await _samples(session, running.admin_url)
            if (
                samples.get("meridian_prefix_index_expired_total", 0) > 0
                and samples.get("meridian_prefix_index_entries") == 0
            ):
                break
            await asyncio.sleep(0.05)
    assert samples["meridian_prefix_index_sweeps_total"] >= 1
    assert samples["meridian_prefix_index_sweep_longest_step_seconds"] >= 0
