"""The router's pre-warm share reaches a real serverless backend: with no client traffic at
all, the gateway wakes it with a one-token warm-up and counts it (routing/prewarm.py)."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from loadtests.emulator.config import EngineParams
from routing.types import BackendKind
from tests.gateway.support import FAST_ENGINE, MODEL
from tests.servers import engine_admitted, settle

SERVERLESS_ENGINE = EngineParams(
    **{**FAST_ENGINE.model_dump(), "cold_start_ms": 50.0, "idle_timeout_s": 30.0}
)


async def _warm_ups(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    return {
        sample.labels["backend"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "meridian_prewarm_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def _fleet(emulator, gateway, share: float):
    pool = [
        await emulator(name, kind=BackendKind.SERVERLESS, engine=SERVERLESS_ENGINE)
        for name in ("s1", "s2")
    ]
    backends = [
        {
            "name": b.config.name, "region": "local", "url": b.url + "/v1", "models": [MODEL],
            "kind": "serverless",
            "capacity": {"cold_start_ms": 50.0, "idle_timeout_s": 30.0},
        }
        for b in pool
    ]  # fmt: skip
    config = parse_config(
        {
            "backends": backends,
            "routing": {"policy": "predicted_ttft", "params": {"prewarm_share": share}},
            "signals": {"tick_interval_s": 0.05},
        },
        "<test>",
    )
    return pool, await gateway(config)


async def test_the_warm_share_of_a_cold_pool_is_woken_without_client_traffic(
    emulator, gateway
) -> None:
    pool, running = await _fleet(emulator, gateway, 0.5)
    await settle(lambda: sum(engine_admitted(b) for b in pool) >= 1)
    async with aiohttp.ClientSession() as session:
        sent = await _warm_ups(session, running.admin_url)
        while not sent:  # counted just after the warm-up's answer: synchronise on the counter
            sent = await _warm_ups(session, running.admin_url)
    # Half of two backends is one: the other stays scaled to zero.
    assert sorted(engine_admitted(b) for b in pool) == [0, 1]
    assert list(sent.values()) == [1.0]
