"""SignalHub: live signals from real servers assembled into routing's FleetSnapshot."""

from __future__ import annotations

import asyncio
import itertools

from prometheus_client import CollectorRegistry

from gateway.signals.hub import SignalHub, SignalsConfig
from gateway.signals.outlier import FailureKind
from gateway.signals.targets import Engine
from routing.types import FleetSnapshot
from tests.servers import hang_bound
from tests.signals.support import (
    SGLANG_PAGE,
    CannedBackend,
    FakeClock,
    canned_backend,
    closed_port_url,
    target,
)


def fast_config(**outlier: object) -> SignalsConfig:
    return SignalsConfig.model_validate(
        {
            "probes": {"interval_s": 0.05, "timeout_s": 0.3, "unhealthy_after": 1},
            "engine_metrics": {"interval_s": 0.05, "timeout_s": 0.3},
            "outlier": {"consecutive_failures": 3, "base_ejection_s": 30.0, **outlier},
            "tick_interval_s": 0.05,
            "snapshot_min_interval_ms": 0.0,
        }
    )


async def wait_for(predicate, hub: SignalHub, timeout_s: float = 3.0) -> FleetSnapshot:
    deadline = asyncio.get_running_loop().time() + hang_bound(timeout_s)
    while True:
        snapshot = hub.snapshot()
        if predicate(snapshot) or asyncio.get_running_loop().time() > deadline:
            return snapshot
        await asyncio.sleep(0.02)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def test_snapshot_carries_probe_and_engine_signals_from_real_servers():
    registry = CollectorRegistry()
    async with (
        canned_backend() as vllm,
        canned_backend(CannedBackend(metrics_page=SGLANG_PAGE)) as sglang,
        canned_backend() as hosted,
    ):
        targets = [
            target("vllm", vllm.url, Engine.VLLM, region="eu"),
            target("sglang", sglang.url, Engine.SGLANG, region="us"),
            target("hosted", hosted.url, Engine.UNKNOWN, region="us"),
            target("down", closed_port_url(), Engine.VLLM, region="ap"),
        ]
        hub = SignalHub(targets, fast_config(), registry=registry, region_rtt_ms={"ap": 150.0})
        await hub.start()
        snap = await wait_for(
            lambda s: (
                s.backends["vllm"].running is not None
                and s.backends["vllm"].rtt_ms is not None
                and s.backends["sglang"].running is not None
                and s.backends["hosted"].rtt_ms is not None
                and not s.backends["down"].healthy
                and hub.scraper.status("down") is not None
            ),
            hub,
        )
        hub.tick()  # the age gauges are refreshed by the tick; do not wait for the loop's
        await hub.stop()
    vllm_state, sglang_state = snap.backends["vllm"], snap.backends["sglang"]
    assert (vllm_state.running, vllm_state.waiting, vllm_state.kv_cache_usage) == (5, 5, 0.75)
    assert (sglang_state.running, sglang_state.waiting) == (8, 4)
    assert vllm_state.rtt_ms is not None and vllm_state.rtt_as_of is not None
    assert vllm_state.metrics_as_of is not None and vllm_state.as_of >= vllm_state.metrics_as_of
    hosted_state = snap.backends["hosted"]
    assert hosted_state.running is None and hosted_state.metrics_as_of is None  # passive only
    assert hosted.requests.get("/metrics", 0) == 0
    assert not snap.backends["down"].healthy and snap.backends["down"].rtt_ms is None
    assert set(snap.region_rtt_ms) == {"eu", "us", "ap"}
    assert snap.region_rtt_ms["ap"] == 150.0  # configured: nothing measured there
    assert snap.region_rtt_ms["eu"] == vllm_state.rtt_ms
    assert sample(registry, "meridian_probe_rtt_seconds_count", backend="vllm", connection="fresh")
    assert sample(registry, "meridian_scrape_errors_total", backend="down", kind="connect")
    assert sample(registry, "meridian_probe_errors_total", backend="down", kind="connect")
    assert sample(registry, "meridian_backend_probe_healthy", backend="down") == 0
    assert (
        sample(registry, "meridian_signal_age_seconds", backend="vllm", signal="probe") is not None
    )
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("meridian-")]


def offline_hub(
    clock: FakeClock, n: int = 4, **outlier: object
) -> tuple[SignalHub, CollectorRegistry]:
    registry = CollectorRegistry()
    targets = [target(f"b{i}", "http://127.0.0.1:9") for i in range(n)]
    config = fast_config(**outlier).model_copy(update={"snapshot_min_interval_ms": 5.0})
    return SignalHub(targets, config, registry=registry, clock=clock), registry


def test_request_reports_update_in_flight_and_traffic_within_the_rebuild_bound():
    clock = FakeClock()
    hub, _ = offline_hub(clock)
    first = hub.snapshot()
    assert hub.snapshot() is first  # nothing changed: the same object, no rebuild
    started_at = clock.now
    hub.on_request_start("b1")
    assert hub.snapshot() is first  # changed, but rebuilt at most every 5 ms
    clock.advance(0.006)
    second = hub.snapshot()
    assert second is not first and second.taken_at == clock.now
    assert second.backends["b1"].in_flight == 1
    assert second.backends["b1"].last_traffic_at == started_at
    assert second.backends["b0"] is first.backends["b0"]  # untouched backends are reused
    hub.on_request_end("b1", ok=True)
    hub.on_request_end("b1", ok=True)  # an extra end never goes negative
    hub.on_request_start("nope")  # unknown backends are ignored, not errors
    clock.advance(0.006)
    assert hub.snapshot().backends["b1"].in_flight == 0


def test_each_snapshot_names_what_changed_since_the_one_before():
    """The hub marks a rebuilt snapshot ``built_from`` the previous one with its dirty
    backends, so routing's view rewrites those rows alone: the hint must cover every backend
    whose state object changed (health and ejections included)."""
    clock = FakeClock()
    hub, _ = offline_hub(clock, max_ejection_percent=50)
    snapshots = [hub.snapshot()]
    assert snapshots[0].changes is None  # the first one: nothing to be built from
    steps = [("b2", False)] * 3 + [("b0", True), ("b1", True), ("b2", True), ("b0", True)]
    for step, (backend, ok) in enumerate(steps):
        hub.on_request_start(backend)
        hub.on_request_end(backend, ok=ok, failure=None if ok else FailureKind.SERVER_ERROR)
        clock.advance(31.0 if step == 4 else 0.006)  # after step 4: b2's ejection is over
        hub.tick()
        snapshots.append(hub.snapshot())
    assert not snapshots[3].backends["b2"].healthy and snapshots[6].backends["b2"].healthy
    for before, after in itertools.pairwise(snapshots):
        assert after.changes is not None and after.changes.previous() is before
        moved = {n for n, s in after.backends.items() if s is not before.backends[n]}
        assert moved and moved <= after.changes.backends


def test_failures_eject_then_the_schedule_readmits():
    clock = FakeClock()
    hub, registry = offline_hub(clock, max_ejection_percent=50)
    for _ in range(3):
        hub.on_request_start("b2")
        hub.on_request_end("b2", ok=False, failure=FailureKind.SERVER_ERROR)
    clock.advance(0.01)
    state = hub.snapshot().backends["b2"]
    assert not state.healthy and state.ejected_until == clock.now - 0.01 + 30.0
    assert sample(registry, "meridian_outlier_ejections_total", backend="b2") == 1
    assert sample(registry, "meridian_backend_ejected", backend="b2") == 1
    clock.advance(30.0)
    hub.tick()  # what the background loop does every tick_interval_s
    clock.advance(0.01)
    state = hub.snapshot().backends["b2"]
    assert state.healthy and state.ejected_until is None
    assert sample(registry, "meridian_backend_ejected", backend="b2") == 0


def test_panic_mode_routes_to_every_backend():
    clock = FakeClock()
    hub, registry = offline_hub(clock, n=2, panic_threshold=0.6, max_ejection_percent=50)
    for _ in range(3):
        hub.on_request_end("b0", ok=False, failure=FailureKind.CONNECT_ERROR)
    clock.advance(0.01)
    snap = hub.snapshot()
    assert hub.health().panic
    assert all(s.healthy and s.ejected_until is None for s in snap.backends.values())
    assert hub.health().ejected_until.keys() == {"b0"}  # still known, for explain
    assert sample(registry, "meridian_outlier_panic") == 1


async def test_locate_uses_the_geo_config():
    config = SignalsConfig.model_validate(
        {"geo": {"regions": {"eu": {"latitude": 50, "longitude": 8}}, "default_origin": "eu"}}
    )
    hub = SignalHub([], config)
    await hub.start()
    geo = hub.locate("192.0.2.1", None)  # no database configured: the default origin
    await hub.stop()
    assert geo.origin == "eu" and geo.region_rtt_ms == {"eu": 5.0}
