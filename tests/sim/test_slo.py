"""The simulator's objectives, spend and early rejection (issue 17), on tiny scenarios."""

from __future__ import annotations

from typing import Any

import numpy as np

from loadtests.sim.cli import _policies
from loadtests.sim.loop import simulate
from loadtests.sim.slo_summary import (
    met_objective,
    rejection_vs_baseline,
    slo_cost_vs_predicted,
    slo_report,
    summarize_all,
)
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny

EXPENSIVE = {"prompt_per_mtok": 3.0, "completion_per_mtok": 15.0}
CHEAP = {"prompt_per_mtok": 0.5, "completion_per_mtok": 2.0}


def _priced(objective_ms: float, **workload: Any) -> dict[str, Any]:
    raw = tiny()
    raw["backends"] = [
        {"name": "local", "region": "near", "count": 2, "price": EXPENSIVE},
        {"name": "remote", "region": "far", "count": 2, "price": CHEAP},
    ]
    raw["workloads"]["chat"].update({"ttft_objective_ms": objective_ms, **workload})
    return raw


def test_slo_cost_spends_less_within_a_loose_objective() -> None:
    scenario = build(_priced(2000.0))
    trace = build_trace(scenario, requests=60)
    runs = [simulate(scenario, trace, p) for p in ("predicted_ttft", "slo_cost")]
    fastest, cheapest = runs
    remote = [b.index for b in fastest.backends if b.region == "far"]
    assert np.isin(cheapest.results.backend, remote).mean() > 0.9
    assert np.isin(fastest.results.backend, remote).mean() < 0.1
    comparison = slo_cost_vs_predicted(runs)
    assert comparison is not None
    assert comparison["spend_ratio"] < 0.5
    assert comparison["kept_of_predicted_ttft_met"] >= 0.95
    assert met_objective(cheapest.results).sum() >= 0.95 * len(trace)
    assert cheapest.results.cost.sum() > 0


def test_a_tight_objective_keeps_slo_cost_near() -> None:
    scenario = build(_priced(100.0))
    trace = build_trace(scenario, requests=40)
    run = simulate(scenario, trace, "slo_cost")
    local = [b.index for b in run.backends if b.region == "near"]
    assert np.isin(run.results.backend, local).all()


def test_early_rejection_refuses_only_in_reject_runs_and_is_reported() -> None:
    raw = tiny(clients={"users": {"region": "near", "rate_rps": 60}})
    raw["backends"] = [{"name": "local", "region": "near", "count": 1}]
    raw["workloads"]["chat"].update({"deadline_ms": 400.0, "output_tokens": [40, 80]})
    scenario = build(raw)
    trace = build_trace(scenario, requests=300)
    runs = [simulate(scenario, trace, p) for p in ("predicted_ttft", "predicted_ttft+reject")]
    baseline, rejecting = runs
    assert not baseline.results.refused.any()
    refused = rejecting.results.refused
    assert refused.any() and np.isnan(rejecting.results.ttft_ms[refused]).all()
    base, mine = summarize_all(runs)
    assert mine.policy == "predicted_ttft+reject" and base.false_rejection_vs_baseline is None
    assert base.late_admitted_share is not None and mine.late_admitted_share is not None
    assert mine.late_admitted_share < base.late_admitted_share
    cut = rejection_vs_baseline(runs)["predicted_ttft+reject"]["late_admitted_cut"]
    assert cut is not None and cut > 1.0
    report = slo_report(runs)
    assert report is not None and "late among admitted cut" in report[0]


def test_nothing_to_report_without_objectives_deadlines_or_prices() -> None:
    scenario = build(tiny())
    run = simulate(scenario, build_trace(scenario, requests=10), "round_robin")
    assert slo_report([run]) is None


def test_the_reject_suffix_is_a_policy_name_on_the_command_line() -> None:
    assert _policies("slo_cost+reject,round_robin") == ["slo_cost+reject", "round_robin"]
    assert isinstance(_policies("nope+reject"), str)
