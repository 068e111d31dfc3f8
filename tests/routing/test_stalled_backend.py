"""A backend that stops answering (no first token, no error until the first-token timeout) is
left within a few requests, not after the timeout (routing.awaiting); in the simulator a path
20 s slower took a third of the traffic for 20 s before."""

from __future__ import annotations

from typing import Any

import pytest

from routing.policies import build_router
from routing.policies.fused_ttft import FusedTTFTRouter
from routing.types import FirstToken, Observation
from tests.routing.routing_fixtures import fleet, profile, state

STEP_S = 0.05  # 20 requests a second
STALL_AT_S, TIMEOUT_S = 5.0, 2.0


def _snapshot() -> Any:
    return fleet(
        state("near", rtt_ms=5.0, running=0, waiting=0, as_of=0.0),
        state("far", region="r2", rtt_ms=50.0, running=0, waiting=0, as_of=0.0),
    )


def _sent_to_near_while_stalled(params: dict[str, Any]) -> tuple[int, int, set[str]]:
    """Requests sent to "near" in the first-token timeout after it stalls, in all, and the
    reasons the decisions gave."""
    router = build_router("predicted_ttft", {"explore_share": 0.0, **params}, 0)
    snapshot, stalled, total = _snapshot(), 0, 0
    hanging: list[float] = []  # send times of the requests "near" never answers
    reasons: set[str] = set()
    for i in range(int(10.0 / STEP_S)):
        now = i * STEP_S
        while hanging and hanging[0] + TIMEOUT_S <= now:  # the gateway's first-token timeout
            router.observe(Observation("near", hanging.pop(0) + TIMEOUT_S, ok=False))
        chosen = router.decide(profile(), snapshot, now).ranked[0]
        reasons.add(chosen.reason)
        if chosen.backend == "near" and now >= STALL_AT_S:
            hanging.append(now)
            stalled += now < STALL_AT_S + TIMEOUT_S
            continue
        total += chosen.backend == "near"
        ttft = (5.0 if chosen.backend == "near" else 50.0) + 10.0
        router.observe_first_token(FirstToken(chosen.backend, now, ttft, chosen.terms_ms,
            predicted_ttft_ms=chosen.predicted_ttft_ms))  # fmt: skip
        router.observe(Observation(chosen.backend, now, ok=True, ttft_ms=ttft,
            first_token_observed=True))  # fmt: skip
    return stalled, total + len(hanging), reasons


def test_a_stalled_backend_is_left_before_any_request_to_it_times_out() -> None:
    stalled, _, reasons = _sent_to_near_while_stalled({})
    # Its first request owes a first token ~3 x 17 + 100 ms later; the overdue ms then outgrow
    # the ~45 ms "far" is behind within a few more decisions at 20 a second.
    assert 1 <= stalled <= 5
    assert any("first token overdue: near +" in reason for reason in reasons)  # explain says why


def test_without_the_overdue_check_it_takes_traffic_until_the_timeout() -> None:
    stalled, _, _ = _sent_to_near_while_stalled({"first_token_overdue_ms": 1e9})
    assert stalled >= 30  # of the 40 decisions in the timeout: the prediction never moved


def test_the_array_and_the_float_paths_score_an_overdue_backend_alike() -> None:
    """The overdue ms land on the same backend's score whether a decision takes the array path
    (explain, the generic pipeline) or the float path (decide on a small fleet), with every row
    eligible and with a subset (a backend of another model, first in the view, moves the
    positions)."""
    backends = (
        state("a", rtt_ms=5.0, running=0, waiting=0, as_of=0.0),
        state("b", rtt_ms=6.0, running=0, waiting=0, as_of=0.0),
        state("near", rtt_ms=1.0, running=0, waiting=0, as_of=0.0),
    )
    other = state("0-other", spec_kwargs={"models": frozenset({"x"})}, rtt_ms=1.0)
    for snapshot in (fleet(*backends), fleet(other, *backends)):
        router = build_router("predicted_ttft", {"explore_share": 0.0}, 0)
        assert isinstance(router, FusedTTFTRouter)
        assert router.decide(profile(), snapshot, 0.0).ranked[0].backend == "near"  # no answer
        array = {c.backend: c.score for c in router.explain(profile(), snapshot, 1.0).ranked}
        floats = router.decide(profile(), snapshot, 1.0)
        assert router.scalar == 2  # both decisions took the float path: two paths compared
        assert floats.ranked[0].backend != "near" and array["near"] > 800.0  # ~1 s past due
        assert {c.backend: c.score for c in floats.ranked} == pytest.approx(array)
