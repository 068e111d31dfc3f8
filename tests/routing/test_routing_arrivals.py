"""Other clients' arrivals between scrapes (routing.arrivals): the rate from the engine's
counters, and the queued work the predictor extrapolates from it."""

from __future__ import annotations

import pytest

from routing.arrivals import SMOOTHED_INTERVALS, ArrivalLedger, EngineTotals
from routing.policies import build_router
from routing.types import Candidate
from tests.routing.routing_fixtures import fleet, profile, state


def _ledger(
    *intervals: tuple[float, float, float, float | None], start: float = 0.0
) -> ArrivalLedger:
    """A ledger fed scrapes of cumulative (at, queries, hits, arrived) after one at zero."""
    ledger = ArrivalLedger()
    ledger.scraped(EngineTotals(start, 0.0, 0.0, 0.0))
    for at, queries, hits, arrived in intervals:
        ledger.scraped(EngineTotals(at, queries, hits, arrived))
    return ledger


def test_no_rate_before_two_scrapes() -> None:
    ledger = ArrivalLedger()
    assert (ledger.uncached_per_s, ledger.requests_per_s) == (None, None)
    ledger.scraped(EngineTotals(0.0, 500.0, 0.0, 3.0))
    assert (ledger.uncached_per_s, ledger.requests_per_s) == (None, None)


def test_others_uncached_are_the_engines_less_ours_not_found_cached() -> None:
    # 10,000 prompt tokens admitted over 2 s, 2,500 of them hits, 6 requests. 2 of them were
    # ours: 2,000 tokens, of which our answers reported 1,500 cached. The others' uncached:
    # 7,500 - 500 = 7,000 tokens (their 8,000 with 1,000 hits), 4 requests.
    ledger = ArrivalLedger()
    ledger.scraped(EngineTotals(0.0, 0.0, 0.0, 0.0))
    ledger.sent(1_200)
    ledger.sent(800)
    ledger.hit(1_500)
    ledger.scraped(EngineTotals(2.0, 10_000.0, 2_500.0, 6.0))
    assert ledger.uncached_per_s == pytest.approx(3_500.0)
    assert ledger.requests_per_s == pytest.approx(2.0)
    # Ours are counted once: the next interval has none of them.
    ledger.scraped(EngineTotals(3.0, 10_000.0, 2_500.0, 6.0))
    assert ledger.uncached_per_s == pytest.approx(7_000 / 3.0)  # ...and a quiet second


def test_ours_never_make_the_others_negative() -> None:
    ledger = ArrivalLedger()
    ledger.scraped(EngineTotals(0.0, 0.0, 0.0, 0.0))
    ledger.sent(1_500, requests=3)  # counted by us before the engine counted them
    ledger.hit(-5)  # a nonsense report counts as no hit
    ledger.scraped(EngineTotals(1.0, 1_000.0, 0.0, 2.0))
    assert (ledger.uncached_per_s, ledger.requests_per_s) == (0.0, 0.0)


def test_ours_counted_a_scrape_before_the_engine_did_are_still_ours() -> None:
    # Our request is sent just before a scrape and reaches the engine's counters just after
    # (its path is slower than the probe said); its hit is reported a scrape later still.
    ledger = ArrivalLedger()
    ledger.scraped(EngineTotals(0.0, 0.0, 0.0, 0.0))
    ledger.sent(1_000)
    ledger.scraped(EngineTotals(1.0, 0.0, 0.0, 0.0))
    ledger.scraped(EngineTotals(2.0, 1_000.0, 600.0, 1.0))
    ledger.hit(600)
    ledger.scraped(EngineTotals(3.0, 1_000.0, 600.0, 1.0))
    assert (ledger.uncached_per_s, ledger.requests_per_s) == (0.0, 0.0)


def test_rates_are_pooled_over_the_last_intervals() -> None:
    # 1 request bringing 1,000 tokens in the first second, 3 with 9,000 in the next two.
    ledger = _ledger((1.0, 1_000.0, 0.0, 1.0), (3.0, 10_000.0, 0.0, 4.0))
    assert ledger.uncached_per_s == pytest.approx(10_000 / 3.0)
    assert ledger.requests_per_s == pytest.approx(4 / 3.0)
    # A quiet second after a burst weighs as much as any: the rate comes down.
    ledger.scraped(EngineTotals(4.0, 10_000.0, 0.0, 4.0))
    assert ledger.uncached_per_s == pytest.approx(10_000 / 4.0)
    # An interval older than the window is forgotten.
    for k in range(SMOOTHED_INTERVALS):
        ledger.scraped(EngineTotals(5.0 + k, 10_000.0 + 500 * (k + 1), 0.0, 4.0 + k + 1))
    assert ledger.uncached_per_s == pytest.approx(500.0)
    assert ledger.requests_per_s == pytest.approx(1.0)


def test_a_window_where_nothing_arrived_says_zero() -> None:
    ledger = _ledger((1.0, 0.0, 0.0, 0.0))
    assert (ledger.uncached_per_s, ledger.requests_per_s) == (0.0, 0.0)


def test_an_engine_without_a_request_counter_gives_tokens_only() -> None:
    ledger = _ledger((1.0, 1_000.0, 0.0, None), (3.0, 4_000.0, 0.0, None))
    assert ledger.uncached_per_s == pytest.approx(4_000 / 3.0)
    assert ledger.requests_per_s is None


@pytest.mark.parametrize(
    "after",
    [
        EngineTotals(2.0, 500.0, 0.0, 5.0),  # queries went back: the engine restarted
        EngineTotals(2.0, 1_500.0, 2_000.0, 5.0),  # more hits than queries: unreadable
        EngineTotals(2.0, 1_500.0, -1.0, 5.0),
        EngineTotals(2.0, 1_500.0, 0.0, 1.0),  # fewer requests ever: a restart
        EngineTotals(1.0, 1_500.0, 0.0, 5.0),  # no time passed
    ],
)
def test_a_reset_forgets_the_window(after: EngineTotals) -> None:
    ledger = _ledger((1.0, 1_000.0, 0.0, 2.0))
    assert ledger.uncached_per_s == pytest.approx(1_000.0)
    ledger.scraped(after)
    assert (ledger.uncached_per_s, ledger.requests_per_s) == (None, None)
    ledger.scraped(EngineTotals(after.at + 1.0, after.queries + 100.0, max(after.hits, 0.0), 9.0))
    assert ledger.uncached_per_s is not None  # measured again from the next interval on


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
