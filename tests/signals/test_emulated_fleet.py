"""Signals against the emulated vLLM backend (loadtests.emulator): real engine model, sockets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from gateway.signals.engine_signals import EngineSignals
from gateway.signals.hub import SignalHub, SignalsConfig
from gateway.signals.outlier import FailureKind
from gateway.signals.targets import BackendTarget, Engine
from loadtests.emulator.config import EmulatedBackendConfig, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from routing.types import BackendKind, BackendSpec
from tests.servers import settle


@pytest.fixture
async def emulator() -> AsyncIterator[Callable[..., object]]:
    started: list[RunningEmulator] = []

    async def _start(**fields: object) -> RunningEmulator:
        fields.setdefault("models", ["m"])
        running = await start_emulated_backend(EmulatedBackendConfig.model_validate(fields))
        started.append(running)
        return running

    yield _start
    for running in started:
        await running.close()


def as_target(emu: RunningEmulator, keep_warm: bool = False) -> BackendTarget:
    engine = emu.config.engine
    spec = BackendSpec(
        name=emu.name,
        region=emu.config.region,
        kind=emu.config.kind,
        models=frozenset(emu.config.models),
        cold_start_ms=engine.cold_start_ms,
        idle_timeout_s=engine.idle_timeout_s,
    )
    return BackendTarget(spec=spec, base_url=emu.url, engine=Engine.VLLM, keep_warm=keep_warm)


async def chat(session: aiohttp.ClientSession, emu: RunningEmulator, **body: object) -> int:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hello " * 40}], **body}
    async with session.post(emu.url + "/v1/chat/completions", json=payload) as response:
        await response.read()
        return response.status


async def test_scrape_sees_queue_and_prefix_cache_of_the_emulated_engine(emulator):
    emu = await emulator(name="busy", engine={"max_num_seqs": 2})
    hub = SignalHub([as_target(emu)], SignalsConfig())
    target = as_target(emu)
    async with aiohttp.ClientSession() as session:
        idle = await hub.scraper.scrape_once(target)
        assert isinstance(idle, EngineSignals) and (idle.running, idle.waiting) == (0, 0)
        load = [asyncio.create_task(chat(session, emu, max_tokens=15)) for _ in range(5)]
        # Scrape until the batch is full with a queue behind it (for a moment one request can
        # be running while the rest have arrived but wait for the next step): while any of the
        # five is still going, that state comes, whatever the machine's speed.
        busy: EngineSignals | None = None
        while busy is None and not all(task.done() for task in load):
            await asyncio.sleep(0.01)
            result = await hub.scraper.scrape_once(target)
            if isinstance(result, EngineSignals) and result.running == 2 and result.waiting:
                busy = result
        assert busy is not None, "the emulated queue never showed in a scrape"
        assert busy.kv_cache_usage is not None and busy.kv_cache_usage > 0
        assert await asyncio.gather(*load) == [200] * 5
        after = await hub.scraper.scrape_once(target)
    # Five identical prompts: all but the first found their prefix cached.
    assert isinstance(after, EngineSignals) and after.prefix_cache_hit_rate is not None
    assert after.prefix_cache_hit_rate > 0.5
    await hub.stop()


async def test_canary_separates_the_cold_start_from_warm_ttft(emulator):
    cold = await emulator(
        name="serverless",
        kind=BackendKind.SERVERLESS,
        engine={"cold_start_ms": 400.0, "idle_timeout_s": 30.0},
    )
    warm = await emulator(name="dedicated", rtt_ms=20.0)
    config = SignalsConfig.model_validate({"probes": {"canary": {"enabled": True}}})
    hub = SignalHub([as_target(cold, keep_warm=True), as_target(warm)], config)
    warm_call_ms: dict[str, float] = {}
    for target in (as_target(cold, keep_warm=True), as_target(warm)):
        await hub.prober.canary_once(target)
        started = time.monotonic()
        await hub.prober.canary_once(target)
        warm_call_ms[target.name] = (time.monotonic() - started) * 1000.0
    await hub.stop()
    serverless, dedicated = hub.prober.summary("serverless"), hub.prober.summary("dedicated")
    assert serverless is not None and dedicated is not None
    assert len(serverless.cold_starts) == 1  # the first canary woke it up
    assert serverless.cold_starts[0].ttft_ms >= 400.0
    # warm TTFT is the second canary's alone, however slow the machine made that call
    assert serverless.warm_ttft_ms is not None
    assert serverless.warm_ttft_ms <= warm_call_ms["serverless"]
    assert dedicated.warm_ttft_ms is not None and dedicated.warm_ttft_ms >= 20.0  # its RTT
    assert dedicated.cold_starts == ()
    assert hub.snapshot().backends["serverless"].last_traffic_at is not None


async def test_a_failing_backend_is_ejected_and_readmitted_on_schedule(emulator):
    bad = await emulator(name="bad", faults={"error_rate": 1.0})
    good = await emulator(name="good")
    config = SignalsConfig.model_validate(
        {
            "outlier": {
                "consecutive_failures": 3,
                "base_ejection_s": 0.3,
                "max_ejection_percent": 50,
                "panic_threshold": 0.0,
            },
            "tick_interval_s": 0.05,
            "snapshot_min_interval_ms": 0.0,
            "probes": {"enabled": False},
            "engine_metrics": {"enabled": False},
        }
    )
    hub = SignalHub([as_target(bad), as_target(good)], config)
    await hub.start()
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            hub.on_request_start("bad")
            status = await chat(session, bad, max_tokens=1)
            failed_at = time.monotonic()  # the hub's clock: the third failure ejects
            hub.on_request_end("bad", ok=status < 500, failure=FailureKind.SERVER_ERROR)
        booked_at = time.monotonic()
        state = hub.snapshot().backends["bad"]
        assert not state.healthy and state.ejected_until is not None
        # on schedule in the hub's own clock: base_ejection_s from the failure that ejected
        # (the wall time around it is the machine's, so no bound is put on that)
        assert failed_at + 0.3 <= state.ejected_until <= booked_at + 0.3
        bad.set_faults(FaultConfig())
        await settle(lambda: hub.snapshot().backends["bad"].healthy)
        assert time.monotonic() >= state.ejected_until  # never readmitted early
        hub.on_request_start("bad")
        assert await chat(session, bad, max_tokens=1) == 200
        hub.on_request_end("bad", ok=True)
    await hub.stop()
    assert hub.outlier.ejection_count("bad") == 1
