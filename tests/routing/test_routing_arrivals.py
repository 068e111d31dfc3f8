"""Other clients' arrivals between scrapes (routing.arrivals): the rate from the engine's
counters, and the queued work the predictor extrapolates from it."""

from __future__ import annotations

import pytest

from routing.arrivals import others_requests_per_s, others_uncached_per_s
from routing.policies import build_router
from routing.types import Candidate
from tests.routing.routing_fixtures import fleet, profile, state


def test_rate_is_the_others_uncached_share_per_second() -> None:
    # 10,000 tokens admitted over 2 s, a quarter of them hits; 2,000 were ours.
    assert others_uncached_per_s(10_000, 2_500, 2_000, 2.0) == pytest.approx(3_000.0)


@pytest.mark.parametrize(
    ("queries", "hits", "own", "interval", "expected"),
    [
        (0, 0, 0, 1.0, 0.0),  # no traffic
        (1_000, 0, 1_500, 1.0, 0.0),  # all of it ours (ours counted before the engine did)
        (1_000, 0, 0, 0.0, None),  # no interval
        (-5, 0, 0, 1.0, None),  # counters reset: an engine restart
        (100, -1, 0, 1.0, None),
        (100, 200, 0, 1.0, None),  # more hits than queries: not a page we can read
    ],
)
def test_rate_edge_cases(
    queries: float, hits: float, own: float, interval: float, expected: float | None
) -> None:
    assert others_uncached_per_s(queries, hits, own, interval) == expected


def _queue(others: float | None, now: float, scraped: float = 10.0) -> Candidate:
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(state("a", running=2, waiting=0, as_of=scraped, others_uncached_per_s=others))
    return router.explain(profile(prompt_tokens=500), snapshot, now).ranked[0]


def test_others_arrivals_queue_ahead_and_grow_with_time_since_the_scrape() -> None:
    at_scrape = _queue(20_000.0, now=10.0).terms_ms["queue"]
    later = _queue(20_000.0, now=10.05).terms_ms["queue"]
    much_later = _queue(20_000.0, now=10.9).terms_ms["queue"]
    quiet = _queue(0.0, now=10.9).terms_ms["queue"]
    unknown = _queue(None, now=10.9).terms_ms["queue"]
    assert at_scrape == quiet == unknown
    assert at_scrape < later <= much_later
    # What arrived more than one first-token window ago has its first token: bounded.
    assert much_later == _queue(20_000.0, now=30.0).terms_ms["queue"]


def test_the_term_moves_the_predicted_ttft_by_the_queue() -> None:
    quiet, busy = _queue(0.0, now=10.5), _queue(20_000.0, now=10.5)
    assert busy.predicted_ttft_ms is not None and quiet.predicted_ttft_ms is not None
    grown = busy.terms_ms["queue"] - quiet.terms_ms["queue"]
    assert grown > 0
    assert busy.predicted_ttft_ms - quiet.predicted_ttft_ms == pytest.approx(grown)


@pytest.mark.parametrize(
    ("arrived", "own", "interval", "expected"),
    [(12, 4, 2.0, 4.0), (3, 5, 1.0, 0.0), (4, 0, 0.0, None), (-1, 0, 1.0, None)],
)
def test_request_rate(arrived: float, own: float, interval: float, expected: float | None) -> None:
    assert others_requests_per_s(arrived, own, interval) == expected


def _slots(running: int, rps: float, now: float) -> float:
    router = build_router("predicted_ttft", {}, 0)
    backend = state(
        "a", spec_kwargs={"max_num_seqs": 8}, running=running, waiting=0, as_of=10.0,
        others_requests_per_s=rps,
    )  # fmt: skip
    return (
        router.explain(profile(prompt_tokens=100), fleet(backend), now).ranked[0].terms_ms["queue"]
    )


def test_others_requests_queue_only_once_they_fill_the_free_slots() -> None:
    # 2 of 8 slots taken, 5 left for others before a new request queues: 10 rps fill them in
    # half a second.
    assert _slots(2, 10.0, 10.4) == _slots(2, 0.0, 10.4)
    assert _slots(2, 10.0, 10.9) > _slots(2, 0.0, 10.9)
    # A full engine: every one of them is a slot ahead, and more of them over time.
    full_quiet, full_soon, full_later = (
        _slots(8, 0.0, 10.5),
        _slots(8, 4.0, 10.2),
        _slots(8, 4.0, 10.5),
    )
    assert full_quiet < full_soon < full_later
