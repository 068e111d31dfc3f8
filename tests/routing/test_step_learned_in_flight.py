"""Requests in flight when a level shift of a backend's offset is confirmed (routing.policies.
predicted_ttft): they paid the new level and come back with a prediction that lacks it. Learned
against the model of today, they say nothing new; learned against their own prediction, each
looked like a new candidate step and left its pending lift on the slow part (scenario 5, seed
5: +36 ms held after the spell, and a tilt away from the recovered backend for ~60 s)."""

from __future__ import annotations

from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import FirstToken, Observation
from tests.routing.routing_fixtures import fleet, profile, state

SNAPSHOT = fleet(
    state("a", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
    state("b", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
)
ONLY_A = profile(exclude=frozenset({"b"}))
EXTRA_MS = 200.0  # the path's new level, unseen by the probes (RTT stays 2 ms)


def _predicted_a(router: PipelineRouter, now: float) -> float:
    ranked = {c.backend: c for c in router.explain(profile(), SNAPSHOT, now).ranked}
    predicted = ranked["a"].predicted_ttft_ms
    assert predicted is not None
    return predicted


def _answer(router: PipelineRouter, at: float, terms: dict[str, float], predicted: float) -> None:
    ttft = sum(terms.values()) - terms.get("bias", 0.0) + EXTRA_MS
    router.observe_first_token(FirstToken("a", at, ttft, terms, predicted_ttft_ms=predicted))
    router.observe(Observation("a", at, ok=True, ttft_ms=ttft, first_token_observed=True))


def test_requests_routed_before_a_confirmed_step_do_not_teach_it_again() -> None:
    router = build_router("predicted_ttft", {}, 0)
    assert isinstance(router, PipelineRouter)
    in_flight = []
    for i in range(4):  # routed to ``a`` before its path slowed; answered after the step
        chosen = router.explain(ONLY_A, SNAPSHOT, 1.0 + 0.01 * i).ranked[0]
        assert chosen.predicted_ttft_ms is not None
        in_flight.append((dict(chosen.terms_ms), chosen.predicted_ttft_ms))
    before = _predicted_a(router, 1.1)
    for i in range(6):  # routed and answered one by one: the step is learned
        at = 2.0 + i
        chosen = router.explain(ONLY_A, SNAPSHOT, at).ranked[0]
        assert chosen.predicted_ttft_ms is not None
        _answer(router, at + 0.5, dict(chosen.terms_ms), chosen.predicted_ttft_ms)
    stepped = _predicted_a(router, 8.0)
    assert stepped >= before + 0.9 * EXTRA_MS  # the step itself is learned
    for i, (terms, predicted) in enumerate(in_flight):
        _answer(router, 8.0 + 0.01 * i, terms, predicted)
    after = _predicted_a(router, 8.1)
    assert abs(after - stepped) <= 5.0  # nothing new: the step is not counted again
