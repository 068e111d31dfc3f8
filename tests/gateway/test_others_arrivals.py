"""Other clients' arrivals between scrapes through the live gateway (routing.arrivals, issue 14):
the hub counts its own attempts and the cached tokens their answers report, and the engine's
counters less those are the others' rates in the backend's state. Scrapes are driven by the
test (the background scraper is off), so each interval holds exactly what the test sent."""

from __future__ import annotations

import aiohttp
import pytest

from gateway.signals.engine_signals import EngineSignals
from gateway.signals.hub import SignalHub
from gateway.signals.targets import BackendTarget, Engine
from gateway.state_keys import RELAY
from loadtests.emulator.server import RunningEmulator
from tests.gateway.support import MODEL, config_for
from tests.servers import settle


def _body(prompt: str) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 2}


async def _chat(session: aiohttp.ClientSession, url: str, prompt: str) -> dict[str, int]:
    async with session.post(url + "/v1/chat/completions", json=_body(prompt)) as response:
        assert response.status == 200, await response.text()
        usage = (await response.json())["usage"]
    return {
        "prompt": usage["prompt_tokens"],
        "cached": usage["prompt_tokens_details"]["cached_tokens"],
    }


async def _scrape(hub: SignalHub, target: BackendTarget) -> float:
    result = await hub.scraper.scrape_once(target)
    assert isinstance(result, EngineSignals), result
    return result.as_of


@pytest.mark.parametrize("on", [True, False])
async def test_the_backend_state_carries_the_others_rates_less_our_own(
    emulator, gateway, on: bool
) -> None:
    backend: RunningEmulator = await emulator("b1")
    config = config_for(
        {"b1": backend.url},
        signals={
            "probes": {"enabled": False},
            "engine_metrics": {"enabled": False, "others_arrivals": on},
            "snapshot_min_interval_ms": 0.0,
        },
    )
    running = await gateway(config)
    hub = running.app[RELAY].fleet
    assert isinstance(hub, SignalHub)
    spec = config.backends[0]
    target = BackendTarget(spec=spec.spec(), base_url=spec.base_url(), engine=Engine.VLLM)
    shared = "the tenant's long system prompt, " * 40
    async with aiohttp.ClientSession() as session:
        start = await _scrape(hub, target)
        # Ours: the same prompt twice through the gateway (the second finds it cached)...
        ours = [await _chat(session, running.url, shared + "one") for _ in range(2)]
        # ...the others': three prompts straight to the engine.
        others = [await _chat(session, backend.url, f"another client {k} " * 30) for k in range(3)]
        await settle(lambda: hub.in_flight("b1") == 0)  # our attempts' holds have ended
        end = await _scrape(hub, target)
    state = hub.snapshot().backends["b1"]
    if not on:
        assert (state.others_uncached_per_s, state.others_requests_per_s) == (None, None)
        return
    assert ours[1]["cached"] > 0  # the second of ours was a hit: not the others' work
    seconds = end - start
    assert state.others_requests_per_s is not None and state.others_uncached_per_s is not None
    assert state.others_requests_per_s * seconds == pytest.approx(3.0)
    uncached = sum(o["prompt"] - o["cached"] for o in others)
    assert state.others_uncached_per_s * seconds == pytest.approx(uncached)
