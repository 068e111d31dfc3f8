"""A backend's engine with a queue (requests waiting at the last scrape, or a full batch):
its surprises are not weighed as steps of the offset (routing.learner). A queue's wait is
the same for every request size, as a path's extra is; scenario 1's spike confirmed ~25 such
"steps" on the eu-west backends, each sending traffic away for a half-life."""

from __future__ import annotations

import pytest

from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import FirstToken, FleetSnapshot
from tests.routing.routing_fixtures import fleet, profile, state

ONLY_A = profile(exclude=frozenset({"b"}))


def _snapshot(waiting: int, running: int = 0) -> FleetSnapshot:
    return fleet(
        state("a", rtt_ms=2.0, running=running, waiting=waiting, as_of=0.0),
        state("b", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
    )


def _shift_after_late_answers(snapshot: FleetSnapshot) -> float:
    router = build_router("predicted_ttft", {}, 0)
    assert isinstance(router, PipelineRouter)
    for i in range(6):  # each answered 300 ms later than predicted, one at a time
        at = 1.0 + i
        chosen = router.explain(ONLY_A, snapshot, at).ranked[0]
        assert chosen.predicted_ttft_ms is not None
        terms = dict(chosen.terms_ms)
        ttft = sum(terms.values()) - terms["bias"] + 300.0
        router.observe_first_token(
            FirstToken("a", at + 0.5, ttft, terms, predicted_ttft_ms=chosen.predicted_ttft_ms)
        )
    est = router.scorer.learner.estimate("a")  # type: ignore[attr-defined]
    assert est is not None
    return float(est.shift_ms)


def test_an_idle_engine_late_by_the_same_amount_is_a_step() -> None:
    assert _shift_after_late_answers(_snapshot(waiting=0)) == pytest.approx(300.0, abs=15.0)


@pytest.mark.parametrize(
    ("waiting", "running"), [(3, 0), (0, 256)], ids=["requests waiting", "a full batch"]
)
def test_an_engine_with_a_queue_is_not_stepped(waiting: int, running: int) -> None:
    assert _shift_after_late_answers(_snapshot(waiting, running)) == 0.0
