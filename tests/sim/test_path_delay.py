"""``path_delay`` events: a backend's request path (and maybe its probes) slower for a while,
and the report of how fast each policy left and came back."""

from __future__ import annotations

from typing import Any

from loadtests.sim.loop import Simulation, simulate
from loadtests.sim.path_events import reactions
from loadtests.sim.scenario import ScenarioError, parse_scenario
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny


def _delayed(**event: Any) -> dict[str, Any]:
    base = {"kind": "path_delay", "backend": "local-0", "start_s": 8, "end_s": 14, "extra_ms": 400}
    return tiny(duration_s=30, events=[base | event])


def _run(raw: dict[str, Any], policy: str) -> tuple[Any, Any]:
    scenario = build(raw)
    simulation = Simulation(scenario, build_trace(scenario), policy)
    return simulation, simulation.run()


def test_requests_pay_the_delay_and_probes_only_when_they_take_the_path() -> None:
    for probes_see, probe_rtt in ((True, None), (False, None), (False, 1.0)):
        event: dict[str, Any] = {"probes_see": probes_see, "end_s": 1e6}
        if probe_rtt is not None:
            event["probe_rtt_ms"] = probe_rtt
        simulation, run = _run(_delayed(**event), "round_robin")
        results, index = run.results, simulation.by_name["local-0"].index
        late = (results.arrived_at >= 9.0) & (results.backend == index)
        other = (results.arrived_at >= 9.0) & (results.backend == index + 1)
        # Same engines, same load: the delayed one is 400 ms slower to its first token.
        gap = float(results.ttft_ms[late].min()) - float(results.ttft_ms[other].min())
        assert 380.0 < gap < 420.0
        probe = simulation.signals.gateways[0].probe_rtt_ms[index]
        expected = probe_rtt if probe_rtt is not None else 2.0 + (400.0 if probes_see else 0.0)
        assert probe is not None and abs(probe - expected) < 5.0


def test_the_report_says_how_fast_a_policy_left_and_came_back() -> None:
    raw = _delayed(probes_see=False) | {
        "clients": {"users": {"region": "near", "rate_rps": 20}},
        "policy_params": {"predicted_ttft": {"explore_share": 0.02}},
    }
    scenario = build(raw)
    _, run = _run(raw, "predicted_ttft")
    (found,) = reactions(run, scenario)
    assert found.backend == "local-0" and found.end_s == 14 and found.pre_share > 0.2
    assert found.leave_s is not None and found.leave_s < 3.0
    assert found.return_s is not None and found.return_s < 10.0
    assert "left in" in found.line() and "back in" in found.line()
    _, stays = _run(raw, "round_robin")
    (never,) = reactions(stays, scenario)
    assert never.leave_s is None and never.return_s is None and "never" in never.line()


def test_overlapping_delays_add_up_and_unknown_backends_are_refused() -> None:
    events = [
        {"kind": "path_delay", "backend": "local-0", "start_s": 5, "end_s": 1e6, "probe_rtt_ms": 1},
        {"kind": "path_delay", "backend": "local-0", "start_s": 10, "end_s": 12, "extra_ms": 300},
    ]
    simulation, _ = _run(tiny(duration_s=15, events=events), "round_robin")
    backend = simulation.by_name["local-0"]
    assert backend.path_extra_ms == 0.0 and backend.probe_rtt_ms == 1.0  # the first still on
    bad = parse_scenario(tiny(events=[{"kind": "path_delay", "backend": "nope", "start_s": 1,
        "end_s": 2, "extra_ms": 1}]), "x.yaml")  # fmt: skip
    assert isinstance(bad, ScenarioError) and "events[0].backend" in bad.message
    backwards = tiny(
        events=[{"kind": "path_delay", "backend": "local-0", "start_s": 3, "end_s": 2}]
    )
    refused = parse_scenario(backwards, "x.yaml")
    assert isinstance(refused, ScenarioError) and "events[0].end_s" in refused.message


def test_explorations_are_counted_and_stay_within_the_budget() -> None:
    raw = _delayed(end_s=1e6, probes_see=False) | {
        "duration_s": 60,
        "clients": {"users": {"region": "near", "rate_rps": 20}},
        "policy_params": {"predicted_ttft": {"explore_share": 0.02}},
    }
    scenario = build(raw)
    trace = build_trace(scenario)
    summary = summarize(simulate(scenario, trace, "predicted_ttft"), trace)
    assert 0.0 < summary.exploration_share <= 0.02 + 2.0 / len(trace)
