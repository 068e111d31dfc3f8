"""The event loop's lag and task count are on /metrics, and streams leave no tasks behind."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.support import MODEL, config_for


async def _loop_gauges(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("meridian_event_loop")
        for sample in family.samples
    }


async def _until(session: aiohttp.ClientSession, url: str, ok: object) -> dict[str, float]:
    """Poll the gauges (sampled every 0.5 s) until ``ok`` holds; the test timeout bounds it."""
    while True:
        gauges = await _loop_gauges(session, url)
        if callable(ok) and ok(gauges):
            return gauges
        await asyncio.sleep(0.1)


async def test_tasks_return_to_their_idle_count_after_streams(emulator, gateway) -> None:
    backend = await emulator("b1")
    # No probes or scrapes: their keep-alive connections (each a server task in this loop,
    # the emulator's included) come and go on their own clock and would move the count.
    quiet = {"probes": {"enabled": False}, "engine_metrics": {"enabled": False}}
    running = await gateway(config_for({"b1": backend.url}, signals=quiet))
    body = {
        "model": MODEL,
        "stream": True,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with aiohttp.ClientSession() as session:
        # One stream first: the pooled upstream connection (and its server task) is part of
        # the idle count.
        async with session.post(running.url + "/v1/chat/completions", json=body) as reply:
            await reply.read()
        idle = await _until(
            session, running.admin_url, lambda g: g.get("meridian_event_loop_tasks", 0)
        )
        assert idle["meridian_event_loop_lag_seconds"] >= 0
        for _ in range(20):
            async with session.post(running.url + "/v1/chat/completions", json=body) as reply:
                assert reply.status == 200
                await reply.read()
        baseline = idle["meridian_event_loop_tasks"]
        await _until(
            session,
            running.admin_url,
            lambda g: g.get("meridian_event_loop_tasks", 1e9) <= baseline,
        )
