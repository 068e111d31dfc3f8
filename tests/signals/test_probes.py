"""Active probes and canaries against real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.signals.errors import SignalErrorKind
from gateway.signals.probe_config import CanaryConfig, ProbeConfig
from gateway.signals.probes import Prober
from routing.types import BackendKind
from tests.servers import settle
from tests.signals.support import CannedBackend, FakeClock, canned_backend, closed_port_url, target


def probe_config(**overrides: object) -> ProbeConfig:
    return ProbeConfig.model_validate({"timeout_s": 0.5, "ewma_alpha": 1.0, **overrides})


async def test_round_trip_measures_pooled_and_fresh_connections():
    async with canned_backend(CannedBackend(models_delay_s=0.03)) as backend:
        t = target("b", backend.url)
        prober = Prober([t], probe_config())
        first = await prober.probe_once(t)
        # The pooled session had no connection yet: that sample counts as fresh, not pooled.
        assert first.pooled_ms is None and first.fresh_ms is not None
        started = time.monotonic()
        second = await prober.probe_once(t)
        call_ms = (time.monotonic() - started) * 1000.0
        await prober.stop()
    assert second.pooled_ms is not None and second.rtt_ms == second.pooled_ms
    # the server's 30 ms delay plus loopback, in milliseconds: within the call that measured it
    # (which also made the fresh connection), whatever a busy machine added to both
    assert 30.0 <= second.pooled_ms <= call_ms
    assert second.fresh_ms is not None and second.connect_ms is not None
    assert second.connect_ms < second.fresh_ms
    assert second.last_error is None and second.active_healthy
    assert backend.requests["/v1/models"] == 4  # pooled + fresh, twice


async def test_timeouts_and_5xx_make_a_backend_unhealthy_after_n_in_a_row(caplog):
    caplog.set_level(logging.INFO, logger="gateway.signals.probes")
    async with canned_backend(CannedBackend(models_delay_s=1.0)) as backend:
        t = target("b", backend.url)
        prober = Prober([t], probe_config(timeout_s=0.1, unhealthy_after=3))
        for expected_healthy in (True, True, False):
            summary = await prober.probe_once(t)
            assert summary.active_healthy is expected_healthy
        assert summary.last_error is not None
        assert summary.last_error.kind is SignalErrorKind.TIMEOUT
        backend.models_delay_s, backend.models_status = 0.0, 503
        summary = await prober.probe_once(t)
        assert summary.consecutive_failures == 4
        assert summary.last_error is not None and "HTTP 503" in summary.last_error.message
        backend.models_status = 200
        summary = await prober.probe_once(t)
        await prober.stop()
    assert summary.active_healthy and summary.consecutive_failures == 0
    assert summary.failures_total == 4 and summary.probes_total == 5
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages  # timeout, then http_status, then recovered


async def test_4xx_is_reported_but_does_not_fail_health():
    async with canned_backend(CannedBackend(models_status=404)) as backend:
        t = target("b", backend.url)
        prober = Prober([t], probe_config(unhealthy_after=1))
        summary = await prober.probe_once(t)
        await prober.stop()
    assert summary.active_healthy and summary.rtt_ms is not None  # the round trip happened
    assert summary.last_error is not None and "probe path" in summary.last_error.message


async def test_unreachable_backend():
    url = closed_port_url()
    t = target("b", url)
    prober = Prober([t], probe_config(unhealthy_after=1))
    summary = await prober.probe_once(t)
    await prober.stop()
    assert not summary.active_healthy
    assert summary.last_error is not None and summary.last_error.kind is SignalErrorKind.CONNECT


def canary_config(**overrides: object) -> ProbeConfig:
    canary = CanaryConfig.model_validate({"enabled": True, "timeout_s": 2.0, **overrides})
    return probe_config(canary=canary)


async def test_canary_measures_ttft_after_the_role_preamble():
    async with canned_backend(CannedBackend(canary_ttft_s=0.08)) as backend:
        t = target("b", backend.url)
        prober = Prober([t], canary_config())
        started = time.monotonic()
        summary = await prober.canary_once(t)
        call_ms = (time.monotonic() - started) * 1000.0
        await prober.stop()
    assert summary.warm_ttft_ms is not None and 80.0 <= summary.warm_ttft_ms <= call_ms
    assert summary.cold_starts == () and summary.last_canary_error is None


async def test_canary_errors_are_values_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="gateway.signals.probes")
    async with canned_backend(CannedBackend(canary_status=500)) as backend:
        t = target("b", backend.url)
        prober = Prober([t], canary_config())
        for _ in range(3):
            summary = await prober.canary_once(t)
        await prober.stop()
    assert [r.getMessage() for r in caplog.records] == [
        "canary of backend b failing: http_status: canary answered HTTP 500"
    ]
    assert summary.last_canary_error is not None
    assert summary.last_canary_error.kind is SignalErrorKind.HTTP_STATUS
    assert summary.warm_ttft_ms is None


async def test_serverless_backends_are_canaried_only_when_kept_warm():
    async with canned_backend() as backend:
        dedicated = target("d", backend.url)
        serverless = target("s", backend.url, kind=BackendKind.SERVERLESS)
        warm = target("w", backend.url, kind=BackendKind.SERVERLESS, keep_warm=True)
        prober = Prober([dedicated, serverless, warm], canary_config(interval_s=0.05))
        assert [prober.canaried(t) for t in (dedicated, serverless, warm)] == [True, False, True]
        await prober.start()
        # until the prober's own record of both canaries (the backend counts a request
        # before the prober has read its answer); settle fails the test if either never comes
        await settle(
            lambda: all(prober.summaries()[name].last_canary_at is not None for name in "dw")
        )
        await prober.stop()
    assert prober.summaries()["s"].last_canary_at is None


async def test_cold_canary_is_a_cold_start_not_warm_latency():
    clock = FakeClock()
    traffic: list[tuple[str, float]] = []
    async with canned_backend(CannedBackend(canary_ttft_s=0.01)) as backend:
        t = target(
            "s", backend.url, kind=BackendKind.SERVERLESS, idle_timeout_s=60.0, keep_warm=True
        )
        prober = Prober(
            [t], canary_config(), clock=clock, on_traffic=lambda b, at: traffic.append((b, at))
        )
        first = await prober.canary_once(t)  # never seen traffic: it was cold
        assert len(first.cold_starts) == 1 and first.warm_ttft_ms is None
        assert "never used" in first.cold_starts[0].reason
        clock.advance(10.0)
        warm = await prober.canary_once(t)
        assert warm.warm_ttft_ms is not None and len(warm.cold_starts) == 1
        clock.advance(61.0)  # idle beyond the timeout: scaled to zero
        idle = await prober.canary_once(t)
        assert len(idle.cold_starts) == 2 and "idle 61s" in idle.cold_starts[1].reason
        assert idle.warm_ttft_ms == warm.warm_ttft_ms
        await prober.stop()
    assert [b for b, _ in traffic] == ["s", "s", "s"]  # canaries count as traffic


async def test_ttft_far_above_warm_is_cold_for_serverless_only():
    async with canned_backend(CannedBackend(canary_ttft_s=0.01)) as backend:
        serverless = target("s", backend.url, kind=BackendKind.SERVERLESS, keep_warm=True)
        dedicated = target("d", backend.url)
        prober = Prober([serverless, dedicated], canary_config(cold_min_excess_ms=200.0))
        warm_ms = {
            t.name: (await prober.canary_once(t)).warm_ttft_ms for t in (serverless, dedicated)
        }
        # 1 s against a 10 ms warm one: the margins hold even when a busy machine stretches
        # the warm measurements by hundreds of milliseconds (0.4 s against 100 ms did not).
        backend.canary_ttft_s = 1.0
        slow_serverless = await prober.canary_once(serverless)
        slow_dedicated = await prober.canary_once(dedicated)
        await prober.stop()
    assert len(slow_serverless.cold_starts) == 1
    assert slow_serverless.cold_starts[0].cold_start_ms > 500.0
    assert warm_ms["s"] is not None and slow_serverless.warm_ttft_ms == warm_ms["s"]  # untouched
    assert slow_dedicated.cold_starts == ()
    assert slow_dedicated.warm_ttft_ms is not None and slow_dedicated.warm_ttft_ms >= 1000.0


async def test_start_stop_leaves_no_tasks_and_bounds_concurrency():
    async with canned_backend(CannedBackend(models_delay_s=0.05)) as backend:
        targets = [target(f"b{i}", backend.url) for i in range(6)]
        prober = Prober(targets, probe_config(interval_s=0.02, concurrency=2, measure_fresh=False))
        await prober.start()
        assert len(ours()) == 6
        # Six loops every ~20 ms want far more than two slots of 50 ms can serve: a queue
        # forms, and the server sees at most two at a time, however long it runs.
        await settle(lambda: backend.requests.get("/v1/models", 0) >= 8)
        await prober.stop()
        assert ours() == []
    assert 1 <= backend.models_in_flight_max <= 2


def ours() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("meridian-")]
