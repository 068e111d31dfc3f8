"""The hub's arrivals feed (gateway/signals/arrivals_feed.py): scrapes in, rates out."""

from __future__ import annotations

import pytest

from gateway.signals.arrivals_feed import ArrivalsFeed
from gateway.signals.engine_signals import EngineSignals, PrefixCounters
from gateway.signals.targets import Engine
from routing.types import BackendKind, BackendSpec, BackendState


def _scrape(at: float, queries: float, finished: float | None = 0.0) -> EngineSignals:
    return EngineSignals(
        Engine.VLLM, at, running=1, waiting=0, prefix_counters=PrefixCounters(0.0, queries),
        requests_finished=finished,
    )  # fmt: skip


def _state() -> BackendState:
    return BackendState(spec=BackendSpec("b", "r", BackendKind.DEDICATED, frozenset({"m"})))


def test_off_the_state_is_left_alone() -> None:
    feed = ArrivalsFeed(["b"], enabled=False)
    feed.sent("b", 100)
    feed.scraped("b", _scrape(0.0, 0.0))
    feed.scraped("b", _scrape(1.0, 500.0))
    state = _state()
    assert feed.filled(state) is state


def test_rates_from_two_scrapes_less_our_own() -> None:
    feed = ArrivalsFeed(["b"], enabled=True)
    feed.scraped("b", _scrape(0.0, 0.0))
    assert feed.filled(_state()).others_uncached_per_s is None  # one scrape: no rate yet
    feed.sent("b", 300)
    feed.answered("b", 100)
    feed.answered("b", None)  # an answer without usage says nothing
    feed.sent("elsewhere", 10_000)  # not in the fleet: ignored
    feed.scraped("b", _scrape(2.0, 1_000.0, finished=2.0))
    feed.scraped("b", _scrape(2.0, 1_000.0, finished=2.0))  # the same scrape again: once
    state = feed.filled(_state())
    assert state.others_uncached_per_s == pytest.approx((1_000 - 200) / 2.0)
    # Arrived: (2 finished + 1 running) - (0 + 1) = 2, less our 1, over 2 s.
    assert state.others_requests_per_s == pytest.approx(0.5)


def test_a_page_without_counters_gives_no_rate() -> None:
    feed = ArrivalsFeed(["b"], enabled=True)
    for at in (0.0, 1.0):
        feed.scraped("b", EngineSignals(Engine.VLLM, at, running=1, waiting=0))
    assert feed.filled(_state()).others_uncached_per_s is None
    feed.scraped("b", _scrape(2.0, 0.0, finished=None))
    feed.scraped("b", _scrape(3.0, 400.0, finished=None))
    state = feed.filled(_state())
    assert (state.others_uncached_per_s, state.others_requests_per_s) == (400.0, None)
