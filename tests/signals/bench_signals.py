"""Request-path costs of the signal read APIs, and the scrape parser's pre-filter.

Run: ``.venv/bin/python -m tests.signals.bench_signals [--json out.json]``. Prints p50 / p99
per operation in microseconds; ratios compare against a baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gateway.signals.engine_signals import parse_engine_page
from gateway.signals.geo import GeoConfig, GeoLocator
from gateway.signals.hub import SignalHub, SignalsConfig
from gateway.signals.targets import Engine
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from tests.signals.geo_fixtures import EU_CLIENT, TEST_REGIONS, write_city_db
from tests.signals.support import FakeClock, target


def timed(op: Callable[[], object], runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter_ns()
        op()
        samples.append((time.perf_counter_ns() - started) / 1000.0)
    samples.sort()
    return {
        "p50_us": statistics.median(samples),
        "p99_us": samples[int(len(samples) * 0.99) - 1],
        "runs": runs,
    }


async def real_vllm_page() -> str:
    """The emulated vLLM backend's page after some traffic (histograms populated)."""
    import aiohttp

    emu = await start_emulated_backend(EmulatedBackendConfig(name="bench", models=["m"]))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(emu.url + "/v1/chat/completions", json=body) as r:
                await r.read()
        async with session.get(emu.url + "/metrics") as r:
            page = await r.text()
    await emu.close()
    return page


def full_parse(page: str) -> None:
    for family in text_string_to_metric_families(page):
        for _ in family.samples:
            pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--backends", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}

    page = asyncio.run(real_vllm_page())
    results["parse full page (baseline)"] = timed(lambda: full_parse(page), 300)
    results["parse_engine_page (pre-filtered)"] = timed(
        lambda: parse_engine_page(page, Engine.VLLM, 0.0), 300
    )

    clock = FakeClock()
    targets = [target(f"b{i}", "http://127.0.0.1:9") for i in range(args.backends)]
    config = SignalsConfig.model_validate({"snapshot_min_interval_ms": 0.0})
    hub = SignalHub(targets, config, clock=clock)
    hub.snapshot()
    results["snapshot, unchanged (cached)"] = timed(hub.snapshot, 20_000)

    def one_dirty() -> None:
        hub.on_request_start("b3")
        hub.snapshot()

    results[f"on_request_start + snapshot rebuild, 1 of {args.backends} dirty"] = timed(
        one_dirty, 20_000
    )

    def all_dirty() -> None:
        hub._dirty.update(hub._targets)
        hub.snapshot()

    results[f"snapshot rebuild, all {args.backends} dirty"] = timed(all_dirty, 5_000)
    results["on_request_start"] = timed(lambda: hub.on_request_start("b1"), 20_000)
    results["on_request_end (ok)"] = timed(lambda: hub.on_request_end("b1", ok=True), 20_000)

    with tempfile.TemporaryDirectory() as tmp:
        db = write_city_db(Path(tmp) / "city.mmdb")
        regions = {n: {"latitude": a, "longitude": o} for n, (a, o) in TEST_REGIONS.items()}
        geo_config = GeoConfig.model_validate(
            {"database_path": db, "regions": regions, "trusted_proxies": ["10.0.0.0/8"]}
        )
        cached = GeoLocator(geo_config)
        cached.load()
        uncached = GeoLocator(geo_config.model_copy(update={"cache_size": 0}))
        uncached.load()
        results["geo.locate, LRU hit"] = timed(lambda: cached.locate(EU_CLIENT, None), 20_000)
        results["geo.locate, database lookup"] = timed(
            lambda: uncached.locate(EU_CLIENT, None), 20_000
        )
        results["geo.locate via trusted proxy XFF"] = timed(
            lambda: cached.locate("10.0.0.1", f"203.0.113.9, {EU_CLIENT}"), 20_000
        )

    base = results["parse full page (baseline)"]["p50_us"]
    print(f"metrics page: {len(page)} bytes, {len(page.splitlines())} lines")
    print(f"{'operation':<52} {'p50 us':>9} {'p99 us':>9}")
    for name, row in results.items():
        print(f"{name:<52} {row['p50_us']:>9.2f} {row['p99_us']:>9.2f}")
    filtered = results["parse_engine_page (pre-filtered)"]["p50_us"]
    print(f"pre-filtered parse / full parse (p50): {filtered / base:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
