"""Canary TTFTs feed the same learner as requests (issue 14): a canary takes the request path,
so it re-measures a backend that no request is choosing."""

from __future__ import annotations

from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from tests.routing.routing_fixtures import fleet, profile, state


def _ttft(router: PipelineRouter, snapshot, backend: str, now: float) -> float:
    decision = router.explain(profile(prompt_tokens=16, max_tokens=1), snapshot, now)
    (candidate,) = (c for c in decision.ranked if c.backend == backend)
    assert candidate.predicted_ttft_ms is not None
    return candidate.predicted_ttft_ms


def test_canaries_slower_than_predicted_teach_the_backends_offset() -> None:
    router = build_router("predicted_ttft", {}, 0)
    assert isinstance(router, PipelineRouter)
    snapshot = fleet(state("a", rtt_ms=5.0), state("b", rtt_ms=5.0))
    before = _ttft(router, snapshot, "a", 1.0)
    for n in range(6):  # its path got 200 ms slower than the probes say
        assert router.observe_canary(snapshot, "a", 2.0 + n, before + 200.0, 16)
    after = _ttft(router, snapshot, "a", 8.0)
    assert after > before + 150.0
    assert abs(_ttft(router, snapshot, "b", 8.0) - before) < 50.0  # not its neighbour's


def test_a_canary_nothing_can_learn_from_is_dropped() -> None:
    snapshot = fleet(state("a"), state("sick", healthy=False))
    assert not build_router("round_robin", {}, 0).observe_canary(snapshot, "a", 1.0, 50.0, 16)
    router = build_router("predicted_ttft", {}, 0)
    assert isinstance(router, PipelineRouter)
    assert not router.observe_canary(snapshot, "gone", 1.0, 50.0, 16)  # not in the fleet
    assert not router.observe_canary(snapshot, "sick", 1.0, 50.0, 16)  # not routable
    assert router.observe_canary(snapshot, "a", 1.0, 50.0, 16, cold_start=False)
