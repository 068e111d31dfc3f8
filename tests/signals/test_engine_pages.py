"""Each engine release's ``/metrics`` page (tests/signals/pages/) through its name map: the
signals routing gets, and what a page that lacks a current name reports."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.signals.engine_metrics import EngineMetricsConfig, EngineMetricsScraper
from gateway.signals.engine_signals import EXPECTED, EngineSignals, parse_engine_page
from gateway.signals.metrics import SignalMetrics
from gateway.signals.targets import Engine
from tests.signals.support import CannedBackend, canned_backend, target

PAGES = Path(__file__).parent / "pages"


def page(name: str) -> str:
    return (PAGES / name).read_text()


def parsed(name: str, engine: Engine) -> EngineSignals:
    result = parse_engine_page(page(name), engine, as_of=1.0)
    assert isinstance(result, EngineSignals), result
    return result


@pytest.mark.parametrize(
    ("name", "engine", "running", "waiting", "kv", "hit_rate"),
    [
        ("vllm-0.11-v1.prom", Engine.VLLM, 5, 5, 0.75, 250 / 1000),
        ("vllm-0.12-v1.prom", Engine.VLLM, 6, 2, 0.4, 0.5),
        # cached_tokens_total summed over cache_source, over all prompt tokens
        ("sglang-0.5.prom", Engine.SGLANG, 8, 4, 0.52, 1200 / 4000),
        ("tgi-3.3.prom", Engine.TGI, 12, 6, None, None),
        ("llamacpp-b4000.prom", Engine.LLAMACPP, 2, 1, 0.63, None),
        # prompt_tokens_total excludes the cached tokens: 250 of 750 + 250
        ("llamacpp-b7000.prom", Engine.LLAMACPP, 2, 1, None, 250 / 1000),
        # recorded from running servers (scripts/capture_*_metrics.sh)
        ("vllm-0.32.0-cpu-busy.prom", Engine.VLLM, 1, 1, 0.0004884004884004867, 512 / 1297),
        ("vllm-0.32.0-cpu-idle.prom", Engine.VLLM, 0, 0, 0.0, 640 / 1501),
        ("llamacpp-0c1e570-busy.prom", Engine.LLAMACPP, 1, 1, None, 134 / (134 + 86)),
        ("llamacpp-0c1e570-idle.prom", Engine.LLAMACPP, 0, 0, None, 152 / (152 + 87)),
    ],
)
def test_every_recorded_page_yields_its_engines_signals(
    name: str, engine: Engine, running: int, waiting: int, kv: float | None, hit_rate: float | None
) -> None:
    signals = parsed(name, engine)
    assert (signals.running, signals.waiting, signals.kv_cache_usage) == (running, waiting, kv)
    assert signals.prefix_cache_hit_rate == (pytest.approx(hit_rate) if hit_rate else None)


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("vllm-0.11-v1.prom", Engine.VLLM),
        ("vllm-0.12-v1.prom", Engine.VLLM),
        ("sglang-0.5.prom", Engine.SGLANG),
        ("tgi-3.3.prom", Engine.TGI),
        ("llamacpp-b7000.prom", Engine.LLAMACPP),
        ("llamacpp-0c1e570-busy.prom", Engine.LLAMACPP),
        ("llamacpp-0c1e570-idle.prom", Engine.LLAMACPP),
        ("vllm-0.32.0-cpu-busy.prom", Engine.VLLM),
        ("vllm-0.32.0-cpu-idle.prom", Engine.VLLM),
    ],
)
def test_current_releases_carry_everything_expected(name: str, engine: Engine) -> None:
    assert parsed(name, engine).missing == ()


def test_a_page_from_before_cached_prompt_counters_reports_what_it_lacks() -> None:
    # older llama.cpp: a KV gauge, but no cached-prompt counter for the hit rate
    assert parsed("llamacpp-b4000.prom", Engine.LLAMACPP).missing == ("prefix_cache_hit_rate",)


def test_llamacpp_cached_counter_turns_into_a_rate_between_scrapes() -> None:
    first = parsed("llamacpp-b7000.prom", Engine.LLAMACPP)
    later = (
        page("llamacpp-b7000.prom")
        .replace("prompt_tokens_total 750", "prompt_tokens_total 850")
        .replace("prompt_tokens_cached_total 250", "prompt_tokens_cached_total 550")
    )
    second = parse_engine_page(later, Engine.LLAMACPP, as_of=2.0, previous=first)
    assert isinstance(second, EngineSignals)
    assert second.prefix_cache_hit_rate == pytest.approx(300 / 400)


async def test_a_renamed_metric_is_one_warning_and_a_metric(caplog) -> None:
    """A vLLM page whose KV gauge is gone (renamed upstream): warned once, flagged by the
    gauge until the name comes back."""
    caplog.set_level(logging.WARNING, logger="gateway.signals.engine_metrics")
    renamed = page("vllm-0.12-v1.prom").replace("vllm:kv_cache_usage_perc", "vllm:kv_usage_new")
    registry = CollectorRegistry()
    metrics = SignalMetrics(registry)
    async with canned_backend(CannedBackend(metrics_page=renamed)) as backend:
        scraper = EngineMetricsScraper(
            [target("b", backend.url)], EngineMetricsConfig(), observer=metrics
        )
        for _ in range(3):
            await scraper.scrape_once(target("b", backend.url))
        flagged = registry.get_sample_value(
            "meridian_engine_signal_missing", {"backend": "b", "signal": "kv_cache_usage"}
        )
        backend.metrics_page = page("vllm-0.12-v1.prom")
        await scraper.scrape_once(target("b", backend.url))
        await scraper.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "kv_cache_usage" in warnings[0], warnings
    assert flagged == 1.0
    for signal in EXPECTED[Engine.VLLM]:
        labels = {"backend": "b", "signal": signal}
        assert registry.get_sample_value("meridian_engine_signal_missing", labels) == 0.0


async def test_a_page_with_none_of_the_engines_names_is_one_warning_and_a_metric(caplog) -> None:
    """An SGLang server configured as ``engine: vllm``: every scrape fails the same way."""
    caplog.set_level(logging.WARNING, logger="gateway.signals.engine_metrics")
    registry = CollectorRegistry()
    metrics = SignalMetrics(registry)
    async with canned_backend(CannedBackend(metrics_page=page("sglang-0.5.prom"))) as backend:
        scraper = EngineMetricsScraper(
            [target("b", backend.url)], EngineMetricsConfig(), observer=metrics
        )
        for _ in range(4):
            await scraper.scrape_once(target("b", backend.url))
        await scraper.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "wrong engine?" in warnings[0], warnings
    labels = {"backend": "b", "kind": "missing_metrics"}
    assert registry.get_sample_value("meridian_scrape_errors_total", labels) == 4.0


def test_recorded_llamacpp_pages_give_the_hit_rate_between_scrapes() -> None:
    # busy -> idle on the running server: 18 more prompt tokens from the cache, 1 computed
    busy = parsed("llamacpp-0c1e570-busy.prom", Engine.LLAMACPP)
    idle = parse_engine_page(
        page("llamacpp-0c1e570-idle.prom"), Engine.LLAMACPP, as_of=2.0, previous=busy
    )
    assert isinstance(idle, EngineSignals)
    assert idle.prefix_cache_hit_rate == pytest.approx(18 / 19)


def test_recorded_vllm_pages_give_the_hit_rate_between_scrapes() -> None:
    # busy -> idle on the running server: 204 more prompt tokens queried, 128 of them hits
    busy = parsed("vllm-0.32.0-cpu-busy.prom", Engine.VLLM)
    idle = parse_engine_page(
        page("vllm-0.32.0-cpu-idle.prom"), Engine.VLLM, as_of=2.0, previous=busy
    )
    assert isinstance(idle, EngineSignals)
    assert idle.prefix_cache_hit_rate == pytest.approx(128 / 204)
