"""Pre-warm: the router names the serverless backends of its warm share that need a warm-up."""

from __future__ import annotations

from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import BackendKind, FleetSnapshot
from tests.routing.routing_fixtures import fleet, profile, state

SERVERLESS = {"kind": BackendKind.SERVERLESS, "cold_start_ms": 5000.0, "idle_timeout_s": 100.0}


def _router(share: float, **params: float) -> PipelineRouter:
    router = build_router("predicted_ttft", {"prewarm_share": share, **params}, 0)
    assert isinstance(router, PipelineRouter)
    return router


def _pool(**last_traffic: float) -> FleetSnapshot:
    """A dedicated backend, a near serverless one (5 ms) and a far one (50 ms)."""
    return fleet(
        state("d", rtt_ms=1.0),
        state("near", spec_kwargs=SERVERLESS, rtt_ms=5.0, last_traffic_at=last_traffic.get("near")),
        state("far", spec_kwargs=SERVERLESS, rtt_ms=50.0, last_traffic_at=last_traffic.get("far")),
    )


def _ttft(router: PipelineRouter, snapshot: FleetSnapshot, backend: str, now: float) -> float:
    decision = router.explain(profile(prompt_tokens=100), snapshot, now)
    (candidate,) = (c for c in decision.ranked if c.backend == backend)
    assert candidate.predicted_ttft_ms is not None
    return candidate.predicted_ttft_ms


def test_no_warm_ups_when_off_or_for_a_policy_without_a_pool_to_keep() -> None:
    assert _router(0.0).warm_up(_pool(), 1.0) == ()
    assert build_router("round_robin", {}, 0).warm_up(_pool(), 1.0) == ()
    assert _router(1.0).warm_up(fleet(state("d")), 1.0) == ()  # nothing scales to zero


def test_a_cold_pool_is_woken_nearest_first_and_the_wake_up_counts_as_a_cold_start() -> None:
    router = _router(0.5)  # 1 of 2 serverless backends
    snapshot = _pool()
    cold_ttft = _ttft(router, snapshot, "near", 1.0)
    assert router.warm_up(snapshot, 1.0) == ("near",)
    # Woken at 1.0: a request at 2.0 waits for the 4 s left of its cold start, not for all 5.
    waking = _ttft(router, snapshot, "near", 2.0)
    assert 3900.0 < waking < cold_ttft - 900.0
    assert _ttft(router, snapshot, "near", 7.0) < 100.0  # warm now
    assert router.warm_up(snapshot, 50.0) == ()  # idle 49% of its timeout: not due
    assert router.warm_up(snapshot, 81.0) == ("near",)  # 80%: a keep-alive, no cold start
    assert _ttft(router, snapshot, "near", 81.5) < 100.0
    assert _router(1.0).warm_up(snapshot, 1.0) == ("near", "far")


def test_a_warm_backend_is_kept_before_a_nearer_cold_one() -> None:
    router = _router(0.5)
    snapshot = _pool(far=10.0)
    assert router.warm_up(snapshot, 20.0) == ()  # "far" is warm and not due; "near" stays cold
    assert router.warm_up(snapshot, 90.0) == ("far",)
    # Its own traffic since then (a newer last_traffic_at) postpones the next warm-up.
    assert router.warm_up(_pool(far=150.0), 160.0) == ()


def test_a_warm_up_survives_a_new_fleet_layout() -> None:
    router = _router(1.0, prewarm_after=0.5)
    assert router.warm_up(_pool(), 1.0) == ("near", "far")
    fewer = fleet(state("d", rtt_ms=1.0), state("far", spec_kwargs=SERVERLESS, rtt_ms=50.0))
    assert router.warm_up(fewer, 2.0) == ()  # "far" was warmed at 1.0 ("near" left the fleet)
    assert router.warm_up(fewer, 51.0) == ("far",)
