"""An outage of one backend is its own, not its region's (routing.learner): scenario 10's 20 s
answers from one black-holed path, taught to the group of backends configured like it, put
~1.7 s on its healthy neighbour too, and traffic left the region for good."""

from __future__ import annotations

from routing.policies import build_router
from routing.types import FirstToken, Observation
from tests.routing.routing_fixtures import fleet, profile, state


def test_answers_past_any_correction_teach_the_backend_and_not_its_group() -> None:
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(
        state("sick", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
        state("well", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
    )
    before = {
        c.backend: c.predicted_ttft_ms for c in router.explain(profile(), snapshot, 0.0).ranked
    }
    for i in range(6):  # the first-token answers of requests the black hole held 20 s
        chosen = router.explain(profile(exclude=frozenset({"well"})), snapshot, 20.0 + i).ranked[0]
        router.observe_first_token(FirstToken("sick", 20.0 + i, 20_000.0, chosen.terms_ms,
            predicted_ttft_ms=chosen.predicted_ttft_ms))  # fmt: skip
        router.observe(Observation("sick", 20.0 + i, ok=True, ttft_ms=20_000.0,
            first_token_observed=True))  # fmt: skip
    after = {
        c.backend: c.predicted_ttft_ms for c in router.explain(profile(), snapshot, 26.0).ranked
    }
    assert after["sick"] is not None and before["sick"] is not None
    assert after["sick"] >= before["sick"] + 900.0  # its own offset, at the cap
    assert after["well"] is not None and before["well"] is not None
    assert abs(after["well"] - before["well"]) <= 5.0  # the neighbour is as it was
