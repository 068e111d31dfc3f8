"""Early rejection's decision: a deadline out of reach of every ranked candidate."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.deadline import ttft_at, unmeetable
from routing.policies import build_router
from routing.types import Candidate, Decision
from tests.routing.routing_fixtures import fleet, profile, state


def _candidate(name: str, ttft: float, queue: float = 0.0, spread: float = 10.0) -> Candidate:
    return Candidate(
        backend=name,
        score=ttft,
        predicted_ttft_ms=ttft,
        predicted_ttft_p90_ms=ttft + 1.2816 * spread,
        terms_ms={"queue": queue, "rtt": ttft - queue},
        term_spread_ms={"queue": spread, "rtt": 0.0},
    )


def test_quantiles_of_a_candidate() -> None:
    c = _candidate("a", 100.0, spread=10.0)
    assert ttft_at(c, 0.9) == c.predicted_ttft_p90_ms
    assert ttft_at(c, 0.5) == pytest.approx(100.0)
    assert ttft_at(c, 0.99) == pytest.approx(100.0 + 2.3263 * 10.0, abs=0.01)
    assert ttft_at(Candidate("rr", 0.0), 0.9) is None


def test_the_best_candidate_decides_and_retry_after_is_the_queue_drain() -> None:
    decision = Decision("p", (_candidate("slow", 9000.0, 8500.0), _candidate("a", 3000.0, 2500.0)))
    assert unmeetable(decision, 4000.0, 0.5) is None
    why = unmeetable(decision, 1000.0, 0.5)
    assert why is not None and why.backend == "a"
    assert why.queue_helps and why.retry_after_s == pytest.approx(2.0)
    assert why.budget_ms == 1000.0 and why.predicted_ms == pytest.approx(3000.0)


def test_when_even_an_empty_queue_is_too_slow_waiting_does_not_help() -> None:
    why = unmeetable(Decision("p", (_candidate("far", 400.0, 150.0),)), 100.0, 0.5)
    assert why is not None and not why.queue_helps
    assert why.retry_after_s == 1.0  # never less than a second; the queue is all that drains


def test_no_prediction_or_no_candidate_is_never_a_refusal() -> None:
    assert unmeetable(Decision("round_robin", (Candidate("a", 0.0),)), 0.0) is None
    assert unmeetable(Decision("p", ()), 0.0) is None
    instant = Candidate("x", 0.0, predicted_ttft_ms=0.0, predicted_ttft_p90_ms=0.0)
    why = unmeetable(Decision("p", (instant,)), -5.0)
    assert why is not None and why.queue_helps is False


def test_a_real_decision_with_a_backlog() -> None:
    snapshot = fleet(state("a", running=256, waiting=300, rtt_ms=1.0))
    decision = build_router("predicted_ttft").explain(profile(prompt_tokens=100), snapshot, 0.0)
    chosen = decision.chosen
    assert chosen is not None and chosen.predicted_ttft_p90_ms is not None
    assert unmeetable(decision, chosen.predicted_ttft_p90_ms + 1.0) is None
    why = unmeetable(decision, 100.0)
    assert why is not None and why.queue_helps and why.retry_after_s > 1.0


@settings(max_examples=100, deadline=None)
@given(
    ttfts=st.lists(st.tuples(st.floats(1.0, 1e5), st.floats(0.0, 1.0)), min_size=1, max_size=5),
    budget=st.floats(-100.0, 1e5),
    quantile=st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_refused_exactly_when_every_candidate_misses(
    ttfts: list[tuple[float, float]], budget: float, quantile: float
) -> None:
    ranked = tuple(_candidate(f"b{i}", t, t * share) for i, (t, share) in enumerate(ttfts))
    why = unmeetable(Decision("p", ranked), budget, quantile)
    at = [ttft_at(c, quantile) or math.inf for c in ranked]
    if why is None:
        assert min(at) <= budget
    else:
        assert min(at) > budget and why.predicted_ms == min(at)
        assert why.retry_after_s >= 1.0
        c = next(c for c in ranked if c.backend == why.backend)
        ttft = c.predicted_ttft_ms or 0.0
        needed = ttft - budget * ttft / why.predicted_ms
        if abs(needed - why.queue_ms) > 1e-6 * max(why.queue_ms, 1.0):  # clear of the boundary
            assert why.queue_helps == (needed <= why.queue_ms)
        assert why.retry_after_s == pytest.approx(max(min(needed, why.queue_ms) / 1000.0, 1.0))
