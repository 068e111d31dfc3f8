"""The other replicas' requests sent since the last scrape count in a backend's depth.

Two gateways that share their state both see the engines' metrics a scrape late. Each counts
its own requests sent since (routing.load), and now the other's too, from the shared in-flight
counts (``BackendState.others_in_flight``): their growth since the scrape was first seen.
"""

from __future__ import annotations

import dataclasses

from routing.fleet_view import ViewCache
from routing.inflight import InFlightLedger
from routing.load import LoadColumns
from routing.policies import build_router
from routing.types import BackendState
from tests.routing.routing_fixtures import fleet, profile, state


def _load(*states: BackendState, cache: ViewCache, load: LoadColumns, now: float) -> list[float]:
    load.bind(cache.get(fleet(*states)), now)
    return load.depth.tolist()


def test_the_others_requests_since_the_scrape_count_as_ours_do() -> None:
    cache, load = ViewCache(), LoadColumns(InFlightLedger(ttl_s=60.0))
    scraped = state("a", running=10, waiting=0, as_of=5.0, others_in_flight=2)
    plain = state("b", in_flight=3)  # no metrics: its in-flight count is its depth
    assert _load(scraped, plain, cache=cache, load=load, now=5.0) == [10.0, 3.0]
    grown = dataclasses.replace(scraped, in_flight=5, others_in_flight=5)
    assert _load(grown, plain, cache=cache, load=load, now=5.5) == [13.0, 3.0]
    load.reserve("a", 5.6)  # ours since the scrape, beside theirs
    assert load.depth.tolist() == [14.0, 3.0]
    shrunk = dataclasses.replace(scraped, others_in_flight=1)  # more of theirs finished
    assert _load(shrunk, plain, cache=cache, load=load, now=5.7) == [10.0, 3.0]
    # A new scrape counts everything open at its time (our 5.6 too): growth starts again.
    rescraped = state("a", running=12, waiting=1, as_of=6.0, others_in_flight=1)
    assert _load(rescraped, plain, cache=cache, load=load, now=6.1) == [13.0, 3.0]


def test_a_scrape_converted_again_is_the_same_scrape() -> None:
    """Another replica's scrape reaches this one with its time converted from the wall clock
    at every snapshot: microseconds apart, it is still the scrape the growth counts from."""
    cache, load = ViewCache(), LoadColumns(InFlightLedger(ttl_s=60.0))
    remote = state("a", running=4, waiting=0, as_of=5.0, metrics_as_of=5.0, others_in_flight=0)
    assert _load(remote, cache=cache, load=load, now=5.0) == [4.0]
    again = dataclasses.replace(remote, metrics_as_of=5.0 + 3e-6, others_in_flight=2)
    assert _load(again, cache=cache, load=load, now=5.5) == [6.0]


def test_a_depth_never_goes_below_zero() -> None:
    cache, load = ViewCache(), LoadColumns(InFlightLedger(ttl_s=60.0))
    busy = state("a", running=1, waiting=0, as_of=5.0, others_in_flight=4)
    assert _load(busy, cache=cache, load=load, now=5.0) == [1.0]
    idle = dataclasses.replace(busy, others_in_flight=0)
    assert _load(idle, cache=cache, load=load, now=5.5) == [0.0]


def test_a_new_layout_keeps_counting_from_the_same_scrape() -> None:
    cache, load = ViewCache(), LoadColumns(InFlightLedger(ttl_s=60.0))
    a = state("a", running=4, waiting=0, as_of=5.0, others_in_flight=0)
    assert _load(a, cache=cache, load=load, now=5.0) == [4.0]
    grown = dataclasses.replace(a, others_in_flight=3)
    # A backend joins: a new view, every row derived again, the growth of "a" kept.
    assert _load(grown, state("b"), cache=cache, load=load, now=5.5) == [7.0, 0.0]


def test_two_gateways_that_share_counts_spread_their_requests() -> None:
    """Between two scrapes, a gateway whose peer just sent five requests to the nearer
    backend (room for four) sends its own elsewhere; told nothing, it follows the peer."""
    chosen = {}
    seqs = {"max_num_seqs": 4}
    for others in (None, 5):
        router = build_router("predicted_ttft", {}, 1)
        shared = None if others is None else 0
        a = state("a", spec_kwargs=seqs, running=2, waiting=0, as_of=5.0, rtt_ms=1.0,
                  others_in_flight=shared)  # fmt: skip
        b = state("b", spec_kwargs=seqs, running=2, waiting=0, as_of=5.0, rtt_ms=30.0,
                  others_in_flight=shared)  # fmt: skip
        router.decide(profile(prompt_tokens=100), fleet(a, b), 5.0)
        router.release("a")
        later = dataclasses.replace(a, others_in_flight=others, in_flight=others or 0)
        decision = router.decide(profile(prompt_tokens=100), fleet(later, b), 5.5)
        assert decision.chosen is not None
        chosen[others] = decision.chosen.backend
    assert chosen == {None: "a", 5: "b"}
