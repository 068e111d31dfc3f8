"""Issue 14: a backend the router stopped choosing is re-measured by a bounded share of requests
and wins its traffic back once it recovers; no exploration risks a tight deadline."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from routing.exploration import ExploreParams, Explorer
from routing.policies import build_router
from routing.types import FirstToken, Observation, RequestProfile
from tests.routing.routing_fixtures import fleet, profile, state

STEP_S = 0.05  # 20 requests a second, one at a time


def _snapshot() -> Any:
    # "near" is 5 ms away, "far" 50 ms; neither probe ever sees what happens to "near".
    return fleet(
        state("near", rtt_ms=5.0, running=0, waiting=0, as_of=0.0),
        state("far", region="r2", rtt_ms=50.0, running=0, waiting=0, as_of=0.0),
    )


def _run(
    router: Any, extra_ms: Callable[[float], float], steps: int, prof: RequestProfile
) -> list[tuple[float, str, bool]]:
    """Decide, then report the first token as the truth says: (time, backend, explored)."""
    snapshot, log = _snapshot(), []
    for i in range(steps):
        now = i * STEP_S
        decision = router.decide(prof, snapshot, now)
        chosen = decision.ranked[0]
        rtt = 5.0 if chosen.backend == "near" else 50.0
        ttft = rtt + 10.0 + (extra_ms(now) if chosen.backend == "near" else 0.0)
        router.observe_first_token(FirstToken(chosen.backend, now, ttft, chosen.terms_ms,
            predicted_ttft_ms=chosen.predicted_ttft_ms))  # fmt: skip
        router.observe(Observation(chosen.backend, now, ok=True, ttft_ms=ttft,
            first_token_observed=True))  # fmt: skip
        log.append((now, chosen.backend, decision.explored))
    return log


def _degraded(start: float, end: float) -> Callable[[float], float]:
    return lambda now: 400.0 if start <= now < end else 0.0


def test_a_recovered_backend_wins_its_traffic_back_within_seconds() -> None:
    """The issue's finding 1: 0 of 150 requests went back to a recovered backend in 75 s."""
    router = build_router("predicted_ttft", {"explore_share": 0.02}, 0)
    log = _run(router, _degraded(5.0, 20.0), 1200, profile())  # 60 s
    after = [(t, b) for t, b, _ in log if t >= 5.0]
    left_at = next(t for t, b in after if b == "far")
    assert left_at - 5.0 < 0.5  # three slow requests, at 20 a second
    during = [b for t, b, _ in log if 6.0 <= t < 20.0]
    assert during.count("near") <= 0.03 * len(during) + 2
    back_at = next(t for t, b in after if t >= 20.0 and b == "near")
    assert back_at - 20.0 <= 10.0
    settled = [b for t, b, _ in log if back_at + 1.0 <= t]
    assert settled.count("near") >= 0.95 * len(settled)
    explored = [e for _, _, e in log]
    assert 0 < sum(explored) <= 0.02 * len(log) + 2


def test_a_permanently_slower_backend_is_re_measured_but_not_returned_to() -> None:
    router = build_router("predicted_ttft", {"explore_share": 0.02}, 0)
    log = _run(router, _degraded(5.0, 1e9), 1200, profile())
    late = [b for t, b, _ in log if t >= 6.0]
    assert late.count("near") <= 0.02 * len(late) + 2  # explorations only: no oscillation


def test_no_exploration_for_a_tight_deadline_or_when_switched_off() -> None:
    for params, prof in (
        ({"explore_share": 0.05}, profile(deadline_s=0.2)),  # 400 ms slow: 200 ms deadline
        ({"explore_share": 0.0}, profile()),
    ):
        router = build_router("predicted_ttft", params, 0)
        log = _run(router, _degraded(5.0, 1e9), 600, prof)
        assert not any(e for _, _, e in log)


def test_explain_shows_the_exploration_without_spending_the_budget() -> None:
    router = build_router("predicted_ttft", {"explore_share": 0.05}, 0)
    _run(router, _degraded(0.0, 1e9), 100, profile())  # 5 s: "near" shunned, credit earned
    explorer = router.scorer.explorer  # type: ignore[attr-defined]
    now = 100 * STEP_S + 6.0
    credit = explorer.credit
    shown = router.explain(profile(), _snapshot(), now)
    assert shown.explored and shown.ranked[0].backend == "near"
    assert "exploring near" in shown.ranked[0].reason and explorer.credit == credit
    spread = shown.ranked[0].term_spread_ms["bias"]
    assert spread > 0.5 * shown.ranked[0].terms_ms["bias"]  # old evidence: widely doubted
    decided = router.decide(profile(), _snapshot(), now)
    assert decided.explored and explorer.credit == min(credit + 0.05, 2.0) - 1.0
    assert explorer.explored >= 1 and explorer.decisions == 101


def test_one_backend_or_fresh_evidence_is_nothing_to_explore() -> None:
    router = build_router("predicted_ttft", {"explore_share": 0.05}, 0)
    only = fleet(state("near", rtt_ms=5.0, running=0, waiting=0, as_of=0.0))
    for i in range(100):
        assert not router.decide(profile(), only, i * 0.01).explored


def _explored_at(log: list[tuple[float, str, bool]]) -> list[float]:
    return [t for t, b, e in log if e and b == "near"]


def test_explorations_of_a_backend_that_stays_slow_thin_out() -> None:
    """Scenario 7's finding: re-measuring a path 300 ms slower for good every ~8 s cost 0.84% of
    requests, and they were its TTFT p99. After ``explore_backoff_after`` explorations that
    find the offset still there, each further one waits for a doubled horizon (up to 8x)."""
    steps = 4800  # 240 s
    flat = build_router("predicted_ttft", {"explore_share": 0.02, "explore_backoff_max": 1}, 0)
    grown = build_router("predicted_ttft", {"explore_share": 0.02}, 0)
    flat_at = _explored_at(_run(flat, _degraded(5.0, 1e9), steps, profile()))
    grown_at = _explored_at(_run(grown, _degraded(5.0, 1e9), steps, profile()))
    flat_gaps = [b - a for a, b in itertools.pairwise(flat_at)]
    gaps = [b - a for a, b in itertools.pairwise(grown_at)]
    assert len(flat_gaps) >= 10 and max(flat_gaps) <= 1.5 * min(flat_gaps)  # no back-off: even
    assert grown_at[:3] == flat_at[:3]  # the first two keep the base horizon
    assert gaps[2] >= 1.5 * gaps[0] and gaps[3] >= 1.5 * gaps[2]  # then it doubles...
    assert max(gaps) <= 8.0 * 10.0  # ...up to 8 horizons of 10 s
    assert len(grown_at) <= 0.5 * len(flat_at)


def test_a_backend_slow_for_minutes_is_found_recovered_within_the_grown_horizon() -> None:
    router = build_router("predicted_ttft", {"explore_share": 0.02}, 0)
    log = _run(router, _degraded(5.0, 125.0), 4800, profile())
    assert len(_explored_at([x for x in log if x[0] < 125.0])) >= 5  # the back-off was reached
    back_at = next(t for t, b, _ in log if t >= 125.0 and b == "near")
    assert back_at - 125.0 <= 80.0  # at most 8 horizons of 10 s
    settled = [b for t, b, _ in log if back_at + 1.0 <= t]
    assert settled.count("near") >= 0.95 * len(settled)


def test_a_recovery_ends_the_streak() -> None:
    """Two slow spells with a recovery between: the second is explored at the base horizon,
    not at the first spell's grown one."""
    router = build_router("predicted_ttft", {"explore_share": 0.02}, 0)
    slow = lambda now: 400.0 if 5.0 <= now < 125.0 or now >= 230.0 else 0.0  # noqa: E731
    log = _run(router, slow, 6000, profile())  # 300 s
    back_at = next(t for t, b, _ in log if t >= 125.0 and b == "near")
    assert back_at < 230.0  # back before the second spell
    second = _explored_at([x for x in log if x[0] >= 230.0])
    assert second and second[0] - 230.0 <= 10.0  # one base horizon, not eight


def test_a_commit_to_an_exploration_nobody_proposed_starts_no_streak() -> None:
    """``committed(explored=True)`` with no candidate found (a caller's own bookkeeping gone
    wrong) counts the exploration and spends its credit, and invents no streak."""
    explorer = Explorer(ExploreParams(share=1.0))
    explorer.credit = 1.0
    explorer.committed(True, 3)
    assert explorer.explored == 1 and explorer.credit == 1.0
    assert explorer.horizon_s(3, 500.0) == ExploreParams().horizon_s
