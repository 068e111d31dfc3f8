"""Learning TTFT at the first token, and the keep-warm credit for idle serverless backends."""

from __future__ import annotations

import math

from routing.learner import OnlineLearner
from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import BackendKind, FirstToken, FirstTokenObserver, FleetSnapshot, Observation
from tests.routing.routing_fixtures import fleet, profile, spec, state

TERMS = {"rtt": 1.0, "queue": 0.0, "prefill": 100.0, "step": 0.0, "first_token_overhead": 0.0}
SERVERLESS = {"kind": BackendKind.SERVERLESS, "cold_start_ms": 5000.0, "idle_timeout_s": 100.0}
SLOWER = {**SERVERLESS, "first_token_overhead_ms": 13.0}  # 3 ms over the default overhead


def _prefill_rate(router: PipelineRouter, backend: str) -> float | None:
    learner = router.scorer.learner  # type: ignore[attr-defined]
    assert isinstance(learner, OnlineLearner)
    estimate = learner.estimate(backend)
    return None if estimate is None else estimate.prefill_rate


def _first_token(router: PipelineRouter, at: float, ttft_ms: float) -> None:
    router.observe_first_token(
        FirstToken("a", at, ttft_ms, TERMS, 1000, 0, predicted_ttft_ms=101.0)
    )


def test_first_token_teaches_the_ttft_model_and_keeps_the_request_in_flight() -> None:
    router = build_router("predicted_ttft", {}, 0)
    assert isinstance(router, FirstTokenObserver)
    snapshot = fleet(state("a"))
    router.decide(profile(prompt_tokens=1000), snapshot, 1.0)
    _first_token(router, 1.3, 301.0)  # the prefill took 3x its prediction
    slowed = _prefill_rate(router, "a")
    assert slowed is not None and slowed < spec("a").prefill_tokens_per_s
    assert router.load.open[0] == 1.0  # still in flight until observe() at the end
    router.observe(
        Observation("a", 5.0, ok=True, output_tokens=100, ttft_ms=301.0, itl_ms=20.0,
                    predicted_terms_ms=TERMS, first_token_observed=True)
    )  # fmt: skip
    assert router.load.open[0] == 0.0
    assert _prefill_rate(router, "a") == slowed  # the TTFT was not learned twice
    estimate = router.scorer.learner.estimate("a")  # type: ignore[attr-defined]
    assert estimate.observations == 1 and estimate.itl_ms is not None
    _first_token(router, 4.0, 301.0)  # a request sent earlier, whose first token came late
    again = _prefill_rate(router, "a")
    assert again is not None and again < slowed and estimate.observations == 1


def test_without_a_first_token_observation_the_end_of_stream_still_learns_ttft() -> None:
    router = build_router("predicted_ttft", {}, 0)
    router.decide(profile(prompt_tokens=1000), fleet(state("a")), 1.0)
    router.observe(Observation("a", 5.0, ok=True, ttft_ms=301.0, predicted_terms_ms=TERMS))
    rate = _prefill_rate(router, "a")
    assert rate is not None and rate < spec("a").prefill_tokens_per_s


def test_first_token_before_any_decision_or_without_a_ttft_is_harmless() -> None:
    router = build_router("predicted_ttft", {}, 0)
    _first_token(router, 1.0, 301.0)  # no fleet seen yet: no spec, no rate learned
    assert _prefill_rate(router, "a") is None
    learner = OnlineLearner()
    learner.observe_first_token(Observation("a", 1.0, ok=True, ttft_ms=None), None)
    learner.observe_first_token(Observation("a", 1.0, ok=True, ttft_ms=-1.0), None)
    assert learner.estimate("a") is None


def test_policies_that_learn_nothing_accept_first_tokens() -> None:
    router = build_router("round_robin", {}, 0)
    router.decide(profile(), fleet(state("a")), 1.0)
    _first_token(router, 9.0, 301.0)
    router.release("a")  # the router's latest time moved on to the first token's
    assert router._latest == 9.0


def _pool(last_traffic_at: float) -> FleetSnapshot:
    """A dedicated backend holding the prompt's prefix, and a warm serverless one that is not."""
    return fleet(
        state("d", running=0, waiting=0, as_of=0.0),
        state("s", spec_kwargs=SERVERLESS, last_traffic_at=last_traffic_at),
    )


def _served_by(router: PipelineRouter, snapshot: FleetSnapshot, now: float, tokens: int) -> str:
    decision = router.decide(profile(prompt_tokens=tokens), snapshot, now)
    chosen = decision.chosen
    assert chosen is not None
    router.release(chosen.backend)
    return chosen.backend


def test_keep_warm_credit_sends_a_near_best_request_to_an_idle_serverless_backend() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    # "s" is 3 ms slower; it wins only once idle at least half its timeout.
    snapshot = fleet(state("d"), state("s", spec_kwargs=SLOWER, last_traffic_at=0.0))
    assert _served_by(router, snapshot, 40.0, 100) == "d"  # idle 40% of its timeout: no credit
    decision = router.decide(profile(prompt_tokens=100), snapshot, 60.0)
    chosen = decision.chosen
    assert chosen is not None and chosen.backend == "s"
    assert "keep-warm" in chosen.reason
    other = decision.ranked[1]
    assert chosen.predicted_ttft_ms is not None and other.predicted_ttft_ms is not None
    # The credit is in the score only: the predicted TTFT still says "s" is slower.
    assert chosen.predicted_ttft_ms > other.predicted_ttft_ms
    assert math.isclose(chosen.score, chosen.predicted_ttft_ms - 50.0)
    # Our request there reset its idle clock: the credit is gone.
    assert _served_by(router, snapshot, 60.1, 100) == "d"


def test_no_keep_warm_credit_beyond_the_margin_when_cold_or_when_off() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    far_spec = {**SERVERLESS, "first_token_overhead_ms": 200.0}
    far = fleet(state("d"), state("s", spec_kwargs=far_spec, last_traffic_at=0.0))
    assert _served_by(router, far, 60.0, 100) == "d"  # 195 ms worse: beyond the margin
    near = fleet(state("d"), state("s", spec_kwargs=SERVERLESS, last_traffic_at=0.0))
    assert _served_by(router, near, 95.0, 100) == "d"  # maybe cold already: no credit
    never = fleet(state("d"), state("s", spec_kwargs=SERVERLESS))
    assert _served_by(router, never, 60.0, 100) == "d"  # never seen active: no credit
    off = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0,
                                          "keep_warm_margin_ms": 0}, 0)  # fmt: skip
    tie = fleet(state("d"), state("s", spec_kwargs=SLOWER, last_traffic_at=0.0))
    assert _served_by(off, tie, 60.0, 100) == "d"


def test_no_keep_warm_credit_while_our_request_is_open_there() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    snapshot = fleet(state("d"), state("s", spec_kwargs=SLOWER, last_traffic_at=0.0))
    router.reserve("s", 0.0)  # a long request, still open: the backend is not idle
    assert _served_by(router, snapshot, 60.0, 100) == "d"


def test_a_keep_warm_credit_earned_only_by_an_excluded_backend_changes_nothing() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    snapshot = fleet(state("d"), state("e"), state("s", spec_kwargs=SLOWER, last_traffic_at=0.0))
    decision = router.decide(profile(prompt_tokens=100, exclude=frozenset({"s"})), snapshot, 60.0)
    chosen = decision.chosen
    assert chosen is not None and chosen.backend in {"d", "e"}
    assert "keep-warm" not in chosen.reason
    decision = router.decide(profile(prompt_tokens=100, exclude=frozenset({"e"})), snapshot, 60.0)
    chosen = decision.chosen
    assert chosen is not None and chosen.backend == "s" and "keep-warm" in chosen.reason
