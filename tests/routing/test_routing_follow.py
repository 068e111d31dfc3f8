"""``PipelineRouter.follow``: a replay makes the router commit to a recorded route and learn
from it as if it had chosen it; a route it may not take leaves the policy's own choice."""

from __future__ import annotations

from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from tests.routing.routing_fixtures import fleet, profile, state

NEAR, FAR, OTHER = "near", "far", "other-model"
SNAPSHOT = fleet(
    state(NEAR, region="r1", rtt_ms=2.0, running=0, waiting=0),
    state(FAR, region="r2", rtt_ms=150.0, running=0, waiting=0),
    state(OTHER, region="r1", rtt_ms=1.0, spec_kwargs={"models": frozenset({"x"})}),
)


def _router() -> PipelineRouter:
    router = build_router("predicted_ttft", {"max_ranked": 3}, 0)
    assert isinstance(router, PipelineRouter)
    return router


def test_following_a_route_commits_to_it_and_learns_its_prefix() -> None:
    router = _router()
    hashes = (11, 22, 33, 44)  # four 16-token blocks
    request = profile(prompt_tokens=64, prefix_hashes=hashes)
    own = router.decide(request, SNAPSHOT, 1.0).chosen
    assert own is not None and own.backend == NEAR  # its own choice
    followed = router.follow(request, SNAPSHOT, 2.0, FAR)
    assert followed.chosen is not None and followed.chosen.backend == FAR
    assert followed.chosen.predicted_ttft_ms is not None  # its prediction for the route
    assert router.ledger.open_count(FAR, 2.0) == 1  # in flight there, as a decision would be
    after = router.explain(profile(prompt_tokens=64, prefix_hashes=hashes), SNAPSHOT, 3.0)
    far = next(c for c in after.ranked if c.backend == FAR)
    assert far.cached_tokens == 64  # the followed request's prefix is now expected there


def test_a_route_the_policy_may_not_take_leaves_its_own_choice() -> None:
    for backend in (OTHER, "gone"):  # filtered out (another model); not in the fleet
        router = _router()
        decision = router.follow(profile(prompt_tokens=10), SNAPSHOT, 1.0, backend)
        assert decision.chosen is not None and decision.chosen.backend == NEAR
