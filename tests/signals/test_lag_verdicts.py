"""A probe or scrape whose deadline passes while the gateway's own event loop is busy is no
verdict on the backend (gateway/lag_timeout.py). The loop is held over the backend's answer by
tests/held_loop.py: the answer sits unread in the kernel while the deadline passes."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from gateway.chain.config import SummaryPollConfig
from gateway.chain.poller import SummaryPoller
from gateway.chain.report import SUMMARY_PATH
from gateway.lag_timeout import LATE_S, LagForgivingTimeout, LoopLagged, judged_timeout
from gateway.read_lag import FLOOR_MS
from gateway.signals.engine_metrics import EngineMetricsConfig, EngineMetricsScraper
from gateway.signals.errors import SignalError, SignalErrorKind
from gateway.signals.metrics import SignalMetrics
from gateway.signals.probe_config import CanaryConfig, ProbeConfig
from gateway.signals.probe_summary import ProbeSummary
from gateway.signals.probes import Prober
from routing.types import BackendKind
from tests.held_loop import HeldAnswer, hold_until, thread_backend
from tests.signals.support import VLLM_PAGE, target

TIMEOUT_S = 0.05
HOLD_S = TIMEOUT_S + LATE_S + 0.05  # past the answer, so past any deadline by over LATE_S
CANARY_STREAM = (
    b'data: {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}\n\n'
    b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
    b"data: [DONE]\n\n"
)
ANSWERS = {
    ("GET", "/v1/models"): ("application/json", b'{"data": []}'),
    ("POST", "/v1/chat/completions"): ("text/event-stream", CANARY_STREAM),
    ("GET", "/metrics"): ("text/plain", VLLM_PAGE.encode()),
    ("GET", SUMMARY_PATH): ("application/json", b'{"data": []}'),  # no summary
}


async def test_a_probe_answered_while_the_loop_was_busy_is_no_failure_and_no_sample() -> None:
    registry = CollectorRegistry()
    held = HeldAnswer(asyncio.get_running_loop(), HOLD_S)
    with thread_backend(held, ANSWERS) as url:
        backend = target("b", url)
        config = {"timeout_s": TIMEOUT_S, "measure_fresh": False, "unhealthy_after": 1}
        prober = Prober(
            [backend], ProbeConfig.model_validate(config), observer=SignalMetrics(registry)
        )
        try:
            held.arm("/v1/models")
            summary = await prober.probe_once(backend)
            # On the old timeout this was a failure: unhealthy after one.
            assert summary.active_healthy and summary.failures_total == 0
            assert summary.probes_total == 0 and summary.rtt_ms is None
            assert summary.last_error is None
            lagged = {"backend": "b", "kind": "lagged"}
            assert registry.get_sample_value("meridian_probe_errors_total", lagged) == 1.0
            summary = await prober.probe_once(backend)  # the loop is free again
        finally:
            await prober.stop()
    assert summary.probes_total == 1 and summary.failures_total == 0
    assert summary.rtt_ms is not None


WITHIN_DEADLINE_S = 30.0
HELD_WITHIN_DEADLINE_S = 0.4


async def _held_within_deadline(
    config: ProbeConfig, path: str, canary: bool
) -> tuple[ProbeSummary, float]:
    """One probe (or canary) whose answer waits ``HELD_WITHIN_DEADLINE_S`` unread, well within
    its deadline; its summary and how long the call took (ms)."""
    held = HeldAnswer(asyncio.get_running_loop(), HELD_WITHIN_DEADLINE_S)
    with thread_backend(held, ANSWERS) as url:
        backend = target("b", url)
        prober = Prober([backend], config)
        try:
            held.arm(path)
            started = time.perf_counter()
            if canary:
                summary = await prober.canary_once(backend)
            else:
                summary = await prober.probe_once(backend)
            took_ms = (time.perf_counter() - started) * 1000.0
        finally:
            await prober.stop()
    assert took_ms >= HELD_WITHIN_DEADLINE_S * 1000.0
    return summary, took_ms


async def test_a_probe_answered_while_the_loop_was_busy_times_the_round_trip_not_the_wait() -> None:
    """Within its deadline, the answer is judged, but its wait to be read is the gateway's
    (gateway/read_lag.py): routing would take it as the backend's RTT."""
    config = ProbeConfig.model_validate({"timeout_s": WITHIN_DEADLINE_S, "measure_fresh": False})
    summary, took_ms = await _held_within_deadline(config, "/v1/models", canary=False)
    assert summary.probes_total == 1 and summary.failures_total == 0
    # The kernel's reading is up to a tick short, and a tick (FLOOR_MS) is taken off it; the
    # rest is the round trip (a loopback's).
    waited_ms = HELD_WITHIN_DEADLINE_S * 1000.0 - 2 * FLOOR_MS
    assert summary.rtt_ms is not None and summary.rtt_ms <= took_ms - waited_ms, (summary, took_ms)


async def test_a_canary_answered_while_the_loop_was_busy_times_its_token_not_the_wait() -> None:
    canary = CanaryConfig.model_validate({"enabled": True, "timeout_s": WITHIN_DEADLINE_S})
    config = ProbeConfig(canary=canary)
    summary, took_ms = await _held_within_deadline(config, "/v1/chat/completions", canary=True)
    assert summary.last_canary_error is None and summary.warm_ttft_ms is not None
    waited_ms = HELD_WITHIN_DEADLINE_S * 1000.0 - 2 * FLOOR_MS
    assert summary.warm_ttft_ms <= took_ms - waited_ms, (summary, took_ms)


async def test_a_scrape_answered_while_the_loop_was_busy_keeps_the_last_status() -> None:
    registry = CollectorRegistry()
    held = HeldAnswer(asyncio.get_running_loop(), HOLD_S)
    with thread_backend(held, ANSWERS) as url:
        backend = target("b", url)
        config = EngineMetricsConfig(timeout_s=TIMEOUT_S)
        scraper = EngineMetricsScraper([backend], config, observer=SignalMetrics(registry))
        try:
            held.arm("/metrics")
            result = await scraper.scrape_once(backend)
            assert isinstance(result, SignalError) and result.kind is SignalErrorKind.LAGGED
            assert scraper.status("b") is None and scraper.latest("b") is None
            lagged = {"backend": "b", "kind": "lagged"}
            assert registry.get_sample_value("meridian_scrape_errors_total", lagged) == 1.0
            result = await scraper.scrape_once(backend)
        finally:
            await scraper.stop()
    status = scraper.status("b")
    assert not isinstance(result, SignalError) and result.running == 5
    assert status is not None and status.errors_total == 0


async def test_a_summary_poll_answered_while_the_loop_was_busy_is_no_error() -> None:
    held = HeldAnswer(asyncio.get_running_loop(), HOLD_S)
    with thread_backend(held, ANSWERS) as url:
        backend = target("eu-gw", url, kind=BackendKind.GATEWAY)
        config = SummaryPollConfig.model_validate({"timeout_s": TIMEOUT_S})
        poller = SummaryPoller([backend], config, own_id="us-gw", max_hops=3)
        held.arm(SUMMARY_PATH)
        result = await poller.poll_once(backend)
        assert isinstance(result, SignalError) and result.kind is SignalErrorKind.LAGGED
        assert poller.last_error("eu-gw") is None
        # Free again: the answer is judged (this backend is no gateway: its page is no summary).
        result = await poller.poll_once(backend)
    assert isinstance(result, SignalError) and result.kind is SignalErrorKind.MALFORMED
    assert poller.last_error("eu-gw") == result


async def test_a_timer_the_loop_ran_late_is_lag_and_one_run_on_time_is_a_timeout() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(LoopLagged) as lagged:
        async with judged_timeout(TIMEOUT_S):
            hold_until(time.monotonic() + TIMEOUT_S + LATE_S + 0.05)  # the loop is busy
            await loop.create_future()  # never done
    assert lagged.value.late_s > LATE_S
    with pytest.raises(TimeoutError) as timed_out:
        async with judged_timeout(TIMEOUT_S):
            await loop.create_future()
    assert type(timed_out.value) is TimeoutError


async def test_a_timeout_error_of_the_block_itself_is_not_judged() -> None:
    with pytest.raises(TimeoutError, match="the block's own") as raised:
        async with judged_timeout(3600.0):
            raise TimeoutError("the block's own")
    assert type(raised.value) is TimeoutError


async def test_a_forgiving_timeout_gives_back_the_loops_lag_then_expires_on_a_free_loop() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    async with LagForgivingTimeout(TIMEOUT_S) as forgiving:
        hold_until(time.monotonic() + TIMEOUT_S + LATE_S + 0.05)  # the loop is busy
        loop.call_soon(done.set_result, None)  # what came meanwhile, read in the next turn
        await done
    assert forgiving.forgiven_s > LATE_S
    with pytest.raises(TimeoutError):  # on a free loop, a wait with nothing coming expires
        async with LagForgivingTimeout(TIMEOUT_S) as forgiving:
            hold_until(time.monotonic() + TIMEOUT_S + LATE_S + 0.05)
            await loop.create_future()  # never done
    assert forgiving.forgiven_s > LATE_S


async def test_a_forgiving_timeout_gives_back_no_more_than_it_may() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with LagForgivingTimeout(TIMEOUT_S, forgivable_s=LATE_S) as forgiving:
            hold_until(time.monotonic() + TIMEOUT_S + 2 * LATE_S)  # late by more than it may
            await loop.create_future()
    assert forgiving.forgiven_s == 0.0
    with pytest.raises(TimeoutError):  # the block's own TimeoutError passes through
        async with LagForgivingTimeout(3600.0):
            raise TimeoutError("the block's own")
