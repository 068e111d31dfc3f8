"""``loadtests.sim_reseeds``: the same requests, other router seeds, each number's range."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests import sim_reseeds
from loadtests.sim.loop import simulate
from loadtests.sim.summary import summarize
from loadtests.sim.trace import build_trace
from tests.sim.conftest import build, tiny


def test_run_zero_is_the_run_every_other_tool_reports_and_the_others_vary_the_seed() -> None:
    scenario = build(tiny())
    spread = sim_reseeds.reseeded(scenario, "predicted_ttft", 3)
    trace = build_trace(scenario, None)
    reported = summarize(simulate(scenario, trace, "predicted_ttft"), trace)
    assert spread.values["e2e_p50_ms"][0] == reported.e2e_p50_ms
    assert spread.values["ttft_p99_ms"][0] == reported.ttft_p99_ms
    assert all(len(values) == 3 for values in spread.values.values())
    again = scenario.model_copy(update={"seed": scenario.seed + sim_reseeds.RESEED * 2})
    third = summarize(simulate(again, trace, "predicted_ttft"), trace)
    assert spread.values["e2e_p99_ms"][2] == third.e2e_p99_ms
    assert spread.low("e2e_p50_ms") <= spread.values["e2e_p50_ms"][0] <= spread.high("e2e_p50_ms")


def test_the_spread_is_relative_to_the_lowest_run() -> None:
    spread = sim_reseeds.Spread("s", 1, "p", {"e2e_p50_ms": [101.0, 100.0, 102.0]})
    assert spread.relative("e2e_p50_ms") == pytest.approx(0.02)
    assert sim_reseeds.Spread("s", 1, "p", {"goodput": [0.0, 0.0]}).relative("goodput") == 0.0


def test_the_command_prints_a_range_per_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--scenarios", "7", "--reseeds", "2", "--policies", "round_robin", "--jobs", "1"]
    assert sim_reseeds.main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "permanently-slower" in out and "round_robin" in out
    assert list(tmp_path.glob("sim-reseeds-*.json"))
    for bad in (["--reseeds", "1"], ["--scenarios", "99"]):
        with pytest.raises(SystemExit):
            sim_reseeds.main(bad)
