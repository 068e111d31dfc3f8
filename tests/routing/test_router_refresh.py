"""``PipelineRouter.refresh``: the gateway brings routing's view and learned rows up to date
when it goes idle, so that the next decision does not rebuild them on its request's path. A
router refreshed before each decision decides bit for bit as one that is not, over snapshot
changes, observations, releases and waits, and leaves nothing for the decision to sync."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.policies import build_router
from tests.routing.router_ops import apply, decision, moved
from tests.routing.routing_fixtures import fleet, profile, state

NOW = 100.0

operation = st.one_of(
    st.tuples(st.just("in_flight"), st.integers(0, 3), st.integers(0, 9)),
    st.tuples(st.just("scrape"), st.integers(0, 3), st.integers(0, 12)),
    st.tuples(st.just("release"), st.integers(0, 3), st.integers(0, 1)),
    st.tuples(st.just("observe"), st.integers(0, 3), st.integers(5, 900)),
    st.tuples(st.just("wait"), st.integers(0, 3), st.integers(1, 400)),  # 10 ms to 4 s
)


def _four_backends(now: float) -> dict[str, Any]:
    return {
        f"b{i}": state(
            f"b{i}", ("r1", "r2")[i % 2], running=i, waiting=i % 2, in_flight=i, as_of=now - 0.5
        )
        for i in range(4)
    }


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(operation, min_size=1, max_size=30))
def test_a_router_refreshed_before_each_decision_decides_as_one_that_is_not(
    ops: list[tuple[str, int, int]],
) -> None:
    params = {"max_ranked": 3, "peer_weight": 0.3}
    refreshed, plain = (build_router("predicted_ttft", params, 7) for _ in range(2))
    now = NOW
    states = _four_backends(now)
    names = sorted(states)
    snapshot = fleet(*states.values(), region_rtt_ms={"r1": 1.0, "r2": 60.0})
    for k, (kind, i, value) in enumerate(ops):
        now += 0.05
        name = names[i]
        if kind in {"in_flight", "scrape"}:
            field = "in_flight" if kind == "in_flight" else "running"
            changed = dataclasses.replace(states[name], **{field: value}, as_of=now)
            snapshot = moved(snapshot, states, name, changed)
        if kind == "wait":
            now += value / 100.0
        for router in (refreshed, plain):
            apply(router, kind, name, value, now, snapshot)
        refreshed.refresh(snapshot, now)
        scorer: Any = refreshed.scorer
        assert not scorer.learner.dirty  # what the decision would have synced is synced
        assert decision(refreshed, snapshot, now, k) == decision(plain, snapshot, now, k)


def test_a_refresh_at_an_older_time_does_not_move_the_router_s_clock_back() -> None:
    router: Any = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(*_four_backends(NOW).values())
    router.decide(profile(prompt_tokens=100), snapshot, NOW)
    router.refresh(snapshot, NOW - 5.0)  # a refresh scheduled before a later decision ran
    assert router._latest == NOW


def test_a_policy_without_per_row_state_is_refreshed_as_a_no_op() -> None:
    refreshed, plain = (build_router("round_robin", {}, 3) for _ in range(2))
    snapshot = fleet(*_four_backends(NOW).values())
    for k in range(6):
        refreshed.refresh(snapshot, NOW + k)
        assert decision(refreshed, snapshot, NOW + k, k) == decision(plain, snapshot, NOW + k, k)
