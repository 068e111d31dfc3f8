"""A reservation is the router's in-flight count as a value: settled or released once."""

from __future__ import annotations

from routing.policies import build_router
from routing.reservation import decide, reserve
from routing.types import Observation
from tests.routing.routing_fixtures import fleet, profile, state


def test_decide_hands_over_the_first_choice_count_and_release_is_idempotent() -> None:
    router = build_router("predicted_ttft", {}, 0)
    decision, held = decide(router, profile(), fleet(state("a"), state("b")), 1.0)
    assert held is not None and decision.chosen is not None
    assert held.backend == decision.chosen.backend and held.held
    assert router.ledger.open_count(held.backend, 1.0) == 1
    held.release()
    held.release()
    held.settle(Observation(held.backend, 2.0, ok=True))  # too late: already given back
    assert not held.held
    assert router.ledger.open_count(held.backend, 2.0) == 0


def test_settle_observes_once_and_reserve_counts_another_candidate() -> None:
    router = build_router("predicted_ttft", {}, 0)
    held = reserve(router, "b", 1.0)
    other = reserve(router, "b", 1.0)
    assert router.ledger.open_count("b", 1.0) == 2
    held.settle(Observation("b", 2.0, ok=True))
    held.settle(Observation("b", 2.0, ok=True))
    held.release()
    assert router.ledger.open_count("b", 2.0) == 1
    other.release()
    assert router.ledger.open_count("b", 2.0) == 0


def test_no_candidate_no_reservation() -> None:
    router = build_router("predicted_ttft", {}, 0)
    decision, held = decide(router, profile(model="nobody-serves-this"), fleet(state("a")), 1.0)
    assert not decision.ranked and held is None
