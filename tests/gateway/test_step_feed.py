"""The relay feeds routing's step clock one tick per upstream read (gateway/step_feed.py), pulled
and pushed, over a real loopback socket; the ticks are on the monotonic clock routing decides on.

Each wait is for an event: the batch the pulled reader yields, the pusher's record of a write.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from yarl import URL

from gateway.step_feed import on_routing_clock, step_ticker
from routing.policies import build_router
from tests.gateway.test_push_phase import DONE, TOKEN, Recorder, Sends, opened, upstream

__all__ = ["upstream"]  # the fixture, shared with the push-phase tests

READS = 4


async def test_each_pulled_read_ticks_once_at_its_arrival(upstream: tuple[URL, Sends]) -> None:
    _, sends = upstream
    exchange = await opened(upstream)
    ticks: list[float] = []
    exchange.tick = ticks.append
    batches = exchange.batches()
    bounds: list[tuple[float, float]] = []
    try:
        for _ in range(READS):  # one read at a time: the batch is that read's
            before = time.monotonic()
            sends.put_nowait(TOKEN)
            assert [event.raw for event in await anext(batches)] == [TOKEN]
            bounds.append((before, time.monotonic()))
        sends.put_nowait(DONE)
        assert [event.raw for event in await anext(batches)] == [DONE]
    finally:
        exchange.close()
    assert len(ticks) == READS + 1  # the [DONE] read too: its step ended
    assert all(low <= at <= high for at, (low, high) in zip(ticks, bounds, strict=False))


async def test_each_pushed_read_ticks_once_inside_the_upstream_callback(
    upstream: tuple[URL, Sends],
) -> None:
    _, sends = upstream
    exchange = await opened(upstream)
    ticks: list[float] = []
    exchange.tick = ticks.append
    pusher = Recorder()

    async def run() -> None:
        async for _ in exchange.all_batches(pusher):
            pass

    relay = asyncio.ensure_future(run())
    bounds: list[tuple[float, float]] = []
    try:
        for n in range(1, READS + 1):
            before = time.monotonic()
            sends.put_nowait(TOKEN)
            await pusher.wait_for(n)
            bounds.append((before, time.monotonic()))
        assert len(ticks) == READS  # one each, counted before the next is sent
        sends.put_nowait(DONE)
        await relay
    finally:
        exchange.close()
    assert pusher.writes == [[TOKEN]] * READS
    assert len(ticks) == READS + 1
    assert all(low <= at <= high for at, (low, high) in zip(ticks, bounds, strict=False))


def test_the_ticker_feeds_the_routers_own_clock_and_nothing_without_one() -> None:
    router = build_router("predicted_ttft")
    tick = step_ticker(router, "a")
    assert tick is not None and router.step_clock is not None
    tick(100.0)
    tick(100.025)  # one step later
    assert router.step_clock.period_ms("a") == pytest.approx(25.0)
    assert router.step_clock.period_ms("b") is None
    assert step_ticker(build_router("round_robin"), "a") is None


def test_a_first_tokens_arrival_moves_to_the_routing_clock() -> None:
    before = time.monotonic()
    arrived = on_routing_clock(time.perf_counter() - 0.5)  # half a second ago
    after = time.monotonic()
    assert before - 0.5 <= arrived <= after - 0.5
    assert before <= on_routing_clock(None) <= time.monotonic()
