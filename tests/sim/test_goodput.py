"""Goodput under a joint objective: TTFT and ITL both within bounds, per request."""

from __future__ import annotations

from loadtests.sim.loop import simulate
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny


def test_goodput_counts_requests_meeting_both_bounds() -> None:
    scenario = build(tiny(objective={"ttft_ms": 400.0, "itl_ms": 30.0}))
    trace = build_trace(scenario)
    run = simulate(scenario, trace, "round_robin")
    loose = summarize(run, trace, 1e9, 1e9)
    assert loose.goodput == loose.completed / loose.requests > 0.9
    assert summarize(run, trace, 1.0, 1e9).goodput == 0.0  # no first token in 1 ms
    assert summarize(run, trace, 1e9, 1e-3).goodput == 0.0  # nor tokens 1 us apart
    # Round robin sends half the requests 200 ms away: they still make 400 ms, not 150.
    goal = scenario.objective
    assert summarize(run, trace, goal.ttft_ms, goal.itl_ms).goodput > 0.9
    assert summarize(run, trace, 150.0, goal.itl_ms).goodput < 0.7
