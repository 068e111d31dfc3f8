"""Gateway events — ejection and readmission, shared state degraded and back, drain — are one
structured line each, on real parts (emulated backends, a real redis-server)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry

from gateway.config import DrainConfig
from gateway.drain import drain
from gateway.observability import log_format
from gateway.state.metrics import register_state_metrics
from gateway.state.sync import SharedStateSync
from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import MODEL, config_for
from tests.observability.support import CapturedLog, until
from tests.redis_server import RedisServer
from tests.state.conftest import fast_config


async def test_ejection_and_readmission_are_one_event_each(
    emulator, gateway, captured: CapturedLog
) -> None:
    bad = await emulator("bad", faults=FaultConfig(error_rate=1.0))
    good = await emulator("good")
    outlier = {
        "consecutive_failures": 2,
        "base_ejection_s": 0.2,
        "max_ejection_percent": 50,
        "panic_threshold": 0.0,
    }
    signals = {"outlier": outlier, "tick_interval_s": 0.02, "probes": {"enabled": False}}
    config = config_for(
        {"bad": bad.url, "good": good.url},
        routing={"policy": "round_robin"},
        signals=signals,
    )
    running = await gateway(config)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        while not captured.events("backend_ejected"):
            async with session.post(running.url + "/v1/chat/completions", json=body) as response:
                assert response.status == 200  # the retry went to the good one
    (ejected,) = captured.events("backend_ejected")
    assert ejected["level"] == "warning"
    assert ejected["backend"] == "bad" and ejected["ejections"] == 1
    assert ejected["ejection_s"] > 0 and ejected["reason"]
    await until(lambda: bool(captured.events("backend_readmitted")))
    (readmitted,) = captured.events("backend_readmitted")
    assert readmitted["backend"] == "bad"


async def test_drain_says_when_it_starts_and_ends(emulator, gateway, captured) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    assert await drain(running.app[RELAY].drain, DrainConfig(deadline_s=5.0))
    started, finished = captured.events()
    assert (started["event"], started["in_flight"]) == ("drain_started", 0)
    assert (finished["event"], finished["ended_early"]) == ("drain_finished", 0)


async def test_shared_state_degraded_and_back(tmp_path: Path, captured: CapturedLog) -> None:
    with RedisServer(tmp_path / "redis") as redis_server:
        sync = SharedStateSync.from_config(fast_config("redis", redis_server), replica_id="r1")
        await sync.start()
        try:
            await until(lambda: not sync.health().degraded)
            assert captured.events() == []  # connecting is no event
            redis_server.kill()
            await until(lambda: bool(captured.events("state_degraded")))
            redis_server.start()
            await until(lambda: bool(captured.events("state_recovered")))
            # The spell also counts, for an alert on spells shorter than a scrape interval.
            registry = CollectorRegistry()
            register_state_metrics(sync, registry)
            spells = {"backend": "redis"}
            assert registry.get_sample_value("meridian_state_degraded_spells_total", spells) == 1
            assert registry.get_sample_value("meridian_state_degraded", spells) == 0
        finally:
            await sync.stop()
    degraded = captured.events("state_degraded")
    assert len(degraded) == 1  # once, however many calls failed meanwhile
    assert degraded[0]["store"] == "redis" and degraded[0]["replica"] == "r1"
    assert degraded[0]["level"] == "warning" and degraded[0]["error_kind"]
    assert captured.events("state_recovered")[0]["store"] == "redis"


def test_text_format_is_one_line_with_its_fields() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(log_format.formatter_for(log_format.resolve("auto", out)))
    logger = logging.getLogger("meridian.test-format")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning(
            "two\nlines", extra={log_format.FIELDS_ATTR: {"event": "x", "n": 2, "none": None}}
        )
    finally:
        logger.removeHandler(handler)
    # A StringIO is no terminal: auto means JSON.
    assert out.getvalue().count("\n") == 1
    assert '"event":"x"' in out.getvalue() and '"msg":"two\\nlines"' in out.getvalue()
    text = log_format.TextFormatter().format(
        logging.makeLogRecord(
            {
                "msg": "two\nlines",
                "levelname": "INFO",
                "name": "n",
                log_format.FIELDS_ATTR: {"k": 1},
            }
        )
    )
    assert "\n" not in text and text.endswith("INFO n two\\nlines k=1")
