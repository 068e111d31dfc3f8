"""``loadtests.sim_windows``: a run cut at its events, each window's numbers from its own
requests."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from loadtests import sim_windows
from loadtests.sim.loop import simulate
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny

SPELL = {"kind": "path_delay", "backend": "local-0", "start_s": 6, "end_s": 12, "extra_ms": 300}


def test_windows_start_and_end_at_the_events_inside_the_run() -> None:
    late = {**SPELL, "start_s": 15, "end_s": 1e6}  # for good: its end is past the run's
    scenario = build(tiny(events=[SPELL, late]))
    assert sim_windows.boundaries(scenario) == [0.0, 6.0, 12.0, 15.0, 20.0]
    assert sim_windows.boundaries(scenario, 8.0) == [0.0, 8.0, 16.0, 20.0]
    assert sim_windows.boundaries(build(tiny())) == [0.0, 20.0]


def test_each_request_counts_in_the_window_it_arrived_in_and_only_there() -> None:
    scenario = build(tiny(events=[SPELL]))
    run = simulate(scenario, build_trace(scenario), "round_robin")
    edges = sim_windows.boundaries(scenario)
    found = sim_windows.windows(run, edges, "round_robin")
    done = ~np.isnan(run.results.ttft_ms)
    assert [w.requests for w in found] == [
        int(np.sum(done & (run.results.arrived_at >= a) & (run.results.arrived_at < b)))
        for a, b in itertools.pairwise(edges)
    ]
    assert sum(w.requests for w in found) == int(done.sum()) > 0
    spell = found[1]
    mask = done & (run.results.arrived_at >= 6.0) & (run.results.arrived_at < 12.0)
    assert spell.ttft_p99_ms == pytest.approx(np.percentile(run.results.ttft_ms[mask], 99))
    # Round robin keeps sending the slow backend its share, and its requests pay the 300 ms.
    assert spell.shares["local-0"] == pytest.approx(0.25, abs=0.1)
    assert spell.ttft_p99_ms is not None and spell.ttft_p99_ms > 300.0
    for window in found:
        assert sum(window.shares.values()) == pytest.approx(1.0)


def test_itl_is_weighted_by_the_gaps_each_answer_waited() -> None:
    scenario = build(tiny())
    run = simulate(scenario, build_trace(scenario), "least_loaded")
    (whole,) = sim_windows.windows(run, [0.0, 20.0], "least_loaded")
    r = run.results
    done = ~np.isnan(r.ttft_ms)
    gaps = np.maximum(r.output_tokens[done] - 1, 0)
    per_answer = (r.e2e_ms[done] - r.ttft_ms[done]) / np.maximum(gaps, 1)
    assert whole.itl_ms == pytest.approx(float(np.average(per_answer, weights=gaps)))


def test_a_window_nobody_arrived_in_is_reported_empty() -> None:
    scenario = build(tiny())
    run = simulate(scenario, build_trace(scenario, requests=5), "round_robin")
    last = float(np.nanmax(run.results.arrived_at))
    found = sim_windows.windows(run, [0.0, last + 0.001, 1e6], "round_robin")
    assert found[1].requests == 0 and found[1].e2e_p50_ms is None and found[1].shares == {}
    assert "-" in sim_windows.table(found, [b.name for b in run.backends])


def test_the_command_prints_every_policy_and_variant_per_window(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = "loadtests/scenarios/5-path-degrades-and-recovers.yaml"
    args = [path, "--policies", "round_robin", "--requests", "300", "--out", str(tmp_path)]
    assert sim_windows.main([*args, "--variant", "wide:interactive_ttft_slack_ms=1e9"]) == 0
    out = capsys.readouterr().out
    assert "windows [0.0, 42.0, 57.0, 100.0, 115.0, 180.0]" in out
    assert out.count("round_robin") == 5 and out.count("[wide]") == 5
    with pytest.raises(SystemExit):
        sim_windows.main([*args, "--every", "0"])
