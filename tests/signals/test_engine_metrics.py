"""Engine metrics: name mapping per engine, and scraping over real sockets with bad pages."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.signals.engine_metrics import EngineMetricsConfig, EngineMetricsScraper
from gateway.signals.engine_signals import EngineSignals, PrefixCounters, parse_engine_page
from gateway.signals.errors import SignalError, SignalErrorKind
from gateway.signals.targets import Engine
from tests.signals.support import (
    LLAMACPP_PAGE,
    SGLANG_PAGE,
    TGI_PAGE,
    VLLM_OLD_PAGE,
    VLLM_PAGE,
    CannedBackend,
    canned_backend,
    closed_port_url,
    target,
)


def parsed(text: str, engine: Engine, previous: EngineSignals | None = None) -> EngineSignals:
    result = parse_engine_page(text, engine, as_of=5.0, previous=previous)
    assert isinstance(result, EngineSignals), result
    return result


def test_vllm_v1_names_sum_counts_and_max_ratios_across_engines():
    signals = parsed(VLLM_PAGE, Engine.VLLM)
    assert (signals.running, signals.waiting, signals.kv_cache_usage) == (5, 5, 0.75)
    assert signals.prefix_cache_hit_rate == pytest.approx(0.25)
    assert signals.as_of == 5.0


def test_vllm_prefix_hit_rate_is_measured_between_scrapes():
    first = parsed(VLLM_PAGE, Engine.VLLM)
    later = VLLM_PAGE.replace("} 1000.0", "} 1400.0").replace("} 250.0", "} 550.0")
    second = parsed(later, Engine.VLLM, previous=first)
    assert second.prefix_counters == PrefixCounters(hits=550.0, queries=1400.0)
    assert second.prefix_cache_hit_rate == pytest.approx(300 / 400)
    idle = parsed(later, Engine.VLLM, previous=second)
    assert idle.prefix_cache_hit_rate is None  # no queries since: no news, not a zero
    restarted = VLLM_PAGE.replace("} 1000.0", "} 10.0").replace("} 250.0", "} 9.0")
    assert parsed(restarted, Engine.VLLM, previous=second).prefix_cache_hit_rate == 0.9


def test_older_vllm_names():
    signals = parsed(VLLM_OLD_PAGE, Engine.VLLM)
    assert (signals.running, signals.waiting, signals.kv_cache_usage) == (7, 0, 0.5)
    assert signals.prefix_cache_hit_rate == 0.4


@pytest.mark.parametrize(
    ("engine", "page", "expected"),
    [
        (Engine.SGLANG, SGLANG_PAGE, (8, 4, 0.52, 0.28)),
        (Engine.TGI, TGI_PAGE, (12, 6, None, None)),
        (Engine.LLAMACPP, LLAMACPP_PAGE, (2, 1, 0.63, None)),
    ],
)
def test_engine_name_mappings(engine, page, expected):
    s = parsed(page, engine)
    assert (s.running, s.waiting, s.kv_cache_usage, s.prefix_cache_hit_rate) == expected


def test_wrong_engine_and_garbage_are_error_values():
    wrong = parse_engine_page(SGLANG_PAGE, Engine.VLLM, as_of=0.0)
    assert isinstance(wrong, SignalError) and wrong.kind is SignalErrorKind.MISSING_METRICS
    assert "wrong engine" in wrong.message
    bad = parse_engine_page("vllm:num_requests_running{x 1\n", Engine.VLLM, as_of=0.0)
    assert isinstance(bad, SignalError) and bad.kind is SignalErrorKind.MALFORMED
    binary = parse_engine_page("\x00\x01\x02 junk", Engine.VLLM, as_of=0.0)
    assert isinstance(binary, SignalError) and binary.kind is SignalErrorKind.MISSING_METRICS


def test_out_of_range_values_are_clamped_and_nan_ignored():
    page = "vllm:kv_cache_usage_perc 1.7\nvllm:num_requests_waiting NaN\nvllm:num_requests_running -3\n"
    s = parsed(page, Engine.VLLM)
    assert (s.kv_cache_usage, s.waiting, s.running) == (1.0, None, 0)


def scraper_for(url: str, engine: Engine = Engine.VLLM, **config: object) -> EngineMetricsScraper:
    settings = EngineMetricsConfig.model_validate({"timeout_s": 1.0, **config})
    return EngineMetricsScraper([target("b", url, engine)], settings)


async def test_scrapes_a_real_server_and_keeps_the_last_good_signals():
    async with canned_backend() as backend:
        scraper = scraper_for(backend.url)
        t = target("b", backend.url)
        first = await scraper.scrape_once(t)
        assert isinstance(first, EngineSignals) and first.running == 5
        backend.metrics_status = 503
        failed = await scraper.scrape_once(t)
        assert isinstance(failed, SignalError) and failed.kind is SignalErrorKind.HTTP_STATUS
        assert scraper.latest("b") == first  # the last good signals stay, ageing
        status = scraper.status("b")
        assert status is not None and status.consecutive_errors == 1
        await scraper.stop()


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"huge_metrics_bytes": 3_000_000}, SignalErrorKind.TOO_LARGE),
        ({"metrics_page": VLLM_PAGE * 200}, SignalErrorKind.TOO_LARGE),  # with Content-Length
        ({"metrics_delay_s": 2.0}, SignalErrorKind.TIMEOUT),
        ({"metrics_page": b"\xff\xfe\x00garbage"}, SignalErrorKind.MALFORMED),
        ({"metrics_page": "vllm:num_requests_running{bad 1\n"}, SignalErrorKind.MALFORMED),
        ({"metrics_page": SGLANG_PAGE}, SignalErrorKind.MISSING_METRICS),
    ],
)
async def test_bad_pages_are_bounded_error_values(change, kind):
    async with canned_backend(CannedBackend(**change)) as backend:
        scraper = scraper_for(backend.url, max_bytes=64 * 1024, timeout_s=0.3)
        result = await scraper.scrape_once(target("b", backend.url))
        assert isinstance(result, SignalError), result
        assert result.kind is kind
        await scraper.stop()


async def test_unreachable_backend_is_a_connect_error():
    url = closed_port_url()
    scraper = scraper_for(url)
    result = await scraper.scrape_once(target("b", url))
    assert isinstance(result, SignalError) and result.kind is SignalErrorKind.CONNECT
    await scraper.stop()


async def test_unknown_engines_are_not_scraped():
    async with canned_backend() as backend:
        scraper = scraper_for(backend.url, engine=Engine.UNKNOWN)
        assert scraper.scraped_backends == []
        await scraper.start()
        await scraper.stop()
        assert backend.requests.get("/metrics", 0) == 0


async def test_failures_log_once_per_state_change(caplog):
    caplog.set_level(logging.INFO, logger="gateway.signals.engine_metrics")
    async with canned_backend(CannedBackend(metrics_status=500)) as backend:
        scraper = scraper_for(backend.url)
        t = target("b", backend.url)
        for _ in range(5):
            await scraper.scrape_once(t)
        backend.metrics_page = "vllm:x{ 1\nvllm:num_requests_running{ 1\n"
        backend.metrics_status = 200
        for _ in range(3):
            await scraper.scrape_once(t)
        backend.metrics_page = VLLM_PAGE
        for _ in range(3):
            await scraper.scrape_once(t)
        await scraper.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages  # failing (http), failing (malformed), recovered
    assert "http_status" in messages[0] and "malformed" in messages[1]
    assert "recovered" in messages[2]
    status = scraper.status("b")
    assert status is not None and status.errors_total == 8 and status.consecutive_errors == 0


async def test_background_loop_scrapes_and_stops_cleanly():
    async with canned_backend() as backend:
        scraper = scraper_for(backend.url, interval_s=0.05)
        await scraper.start()
        # wait on the scraper's own results: the backend counts a request before the scraper
        # has read its answer, so a stop right after the third count can leave two results
        for _ in range(500):
            if scraper.version >= 3:
                break
            await asyncio.sleep(0.02)
        await scraper.stop()
        assert scraper.version >= 3
        assert backend.requests["/metrics"] >= scraper.version
        seen = backend.requests["/metrics"]
        await asyncio.sleep(0.15)
        assert backend.requests["/metrics"] == seen  # nothing left running
