"""Corrections pooled over identically configured backends (``peer_weight``)."""

from __future__ import annotations

from routing.learner import LearnerParams, OnlineLearner
from routing.policies import build_router
from routing.types import FirstToken, Observation
from tests.routing.routing_fixtures import fleet, profile, spec, state

TERMS = {"rtt": 1.0, "queue": 0.0, "prefill": 100.0, "step": 0.0, "first_token_overhead": 0.0}


def _prefill_terms(peer_weight: float) -> tuple[float, float, float]:
    """Prefill predicted on "a" (observed slow), on its twin "b" (never observed) and on
    "c" (configured differently), after "a" was seen prefilling 3x slower than predicted."""
    router = build_router("predicted_ttft", {"peer_weight": peer_weight}, 0)
    snapshot = fleet(
        state("a"), state("b"), state("c", spec_kwargs={"prefill_tokens_per_s": 10_001.0})
    )
    router.decide(profile(prompt_tokens=1000), snapshot, 1.0)
    for k in range(20):
        router.observe_first_token(FirstToken("a", 1.0 + k, 301.0, TERMS, 1000, 0))
    ranked = router.explain(profile(prompt_tokens=1000), snapshot, 30.0).ranked
    prefill = {c.backend: c.terms_ms["prefill"] for c in ranked}
    return prefill["a"], prefill["b"], prefill["c"]


def test_a_twin_backend_learns_from_its_peers_and_a_differently_configured_one_does_not() -> None:
    a, b, c = _prefill_terms(0.75)
    assert a > 150.0 and b > 150.0  # both moved most of the way towards the pooled rate
    assert a > b  # "a"'s own estimate still counts for a quarter
    assert c < 101.0
    alone_a, alone_b, _ = _prefill_terms(0.0)
    assert alone_b < 101.0 and alone_a > 150.0  # without pooling only "a" learns


def test_members_follow_the_pooled_estimate_in_batches() -> None:
    learner = OnlineLearner(LearnerParams(peer_weight=1.0))
    names = [f"b{k}" for k in range(8)]
    for name in names:  # 8 members: refreshed together every 2nd pooled observation
        learner.observe_first_token(Observation(name, 1.0, ok=True, ttft_ms=301.0,
                                                predicted_terms_ms=TERMS), spec(name))  # fmt: skip
    seen = []
    for k in range(2):
        learner.dirty_peers.clear()
        obs = Observation("b0", 2.0 + k, ok=True, ttft_ms=301.0, predicted_terms_ms=TERMS)
        learner.observe_first_token(obs, spec("b0"))
        seen.append(len(learner.dirty_peers))
    assert sorted(seen) == [0, 1]
    peer = learner.peer(spec("b7"))
    assert peer is not None and peer.observations == 10
    assert OnlineLearner().peer(spec("b0")) is None
